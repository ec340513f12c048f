// Rendering a parsed template, and the built-in filters, tests, methods and globals it calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace salvo::jinja {

// Bounds that keep a hostile or buggy template from exhausting the machine: output and string
// sizes, macro/loop nesting (stack), and total evaluation steps (time, e.g. `range(10**12)`).
struct RenderLimits {
  size_t max_output_bytes = 64u << 20;
  int max_depth = 512;             // nested expressions, loops and macro calls
  uint64_t max_steps = 5'000'000;  // real templates take tens per message
};

// Renders with `variables` as the template's globals (messages, add_generation_prompt, ...).
// Throws JinjaError naming line:column.
std::string render_template(const ParsedTemplate& tmpl, const ValueDict& variables,
                            const RenderLimits& limits);

// ---- built-ins (jinja_builtins.cc); they throw JinjaError(kNoPos, ...) on bad arguments ----

Value apply_filter(const std::string& name, const Value& input, ValueList& args, KwArgs& kwargs);
bool apply_test(const std::string& name, const Value& input, ValueList& args);
// A method on a str, dict or list (`s.startswith('x')`, `d.items()`); throws if there is none.
Value call_method(const Value& object, const std::string& name, ValueList& args, KwArgs& kwargs);
// range, namespace, dict, raise_exception, strftime_now.
void add_global_functions(ValueDict& globals);

// Argument `name` of a built-in call: by keyword, else by position, else the fallback (returned
// by value: callers often pass a temporary).
Value arg(const ValueList& args, const KwArgs& kwargs, size_t index, const char* name,
          const Value& fallback);

// Python-like helpers shared by the renderer and the built-ins.
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
ValueList iterate(const Value& value);  // for loops and filters: list items, dict keys, str chars
bool python_less(const Value& a, const Value& b);  // throws for unorderable types
std::string python_strip(const std::string& s, const Value& chars, bool left, bool right);

}  // namespace salvo::jinja
