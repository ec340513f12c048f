// The dynamic value type of the Jinja subset that chat templates are written in. It mirrors the
// Python objects a template sees under transformers' apply_chat_template: None, bool, int, float,
// str, list, dict (insertion-ordered, string keys), namespace objects, callables, and Jinja's
// Undefined. Lists and dicts are shared by reference, as in Python, so `ns.x = ...` through a
// namespace is visible to every holder of it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace salvo::jinja {

// Line and column (1-based) in the template source; every error names one.
struct SourcePos {
  int line = 1;
  int column = 1;
};
// Errors raised by built-ins carry no position; the renderer fills in the call site.
inline constexpr SourcePos kNoPos{0, 0};

// Thrown inside the lexer, parser and renderer and turned into a Status at the API boundary
// (chat_template.cc): a template error can surface many frames deep in recursive evaluation, and
// unwinding with an exception keeps every evaluator from threading Expected<> through each call.
class JinjaError : public std::runtime_error {
 public:
  JinjaError(SourcePos pos, const std::string& message) : std::runtime_error(message), pos_(pos) {}
  SourcePos pos() const { return pos_; }

 private:
  SourcePos pos_;
};

class Value;
using ValueList = std::vector<Value>;
using KwArgs = std::vector<std::pair<std::string, Value>>;

struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // namespace() objects accept attribute assignment
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

// A built-in function or macro. Arguments arrive evaluated; a JinjaError thrown from inside
// is re-positioned at the call site by the renderer.
struct Callable {
  std::string name;
  std::function<Value(ValueList& args, KwArgs& kwargs)> fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = "") {
    Value v;
    v.str_ = std::move(hint);
    return v;
  }
  static Value none() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}       // NOLINT: literals convert implicitly
  Value(int i) : kind_(Kind::kInt), int_(i) {}         // NOLINT
  Value(int64_t i) : kind_(Kind::kInt), int_(i) {}     // NOLINT
  Value(double f) : kind_(Kind::kFloat), float_(f) {}  // NOLINT
  Value(std::string s) : kind_(Kind::kString), str_(std::move(s)) {}  // NOLINT
  Value(const char* s) : kind_(Kind::kString), str_(s) {}             // NOLINT
  static Value list(ValueList items = {});
  static Value dict();
  static Value namespace_object();
  static Value callable(std::string name, std::function<Value(ValueList&, KwArgs&)> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_; }
  // The name an Undefined was looked up under, for "'x' is undefined" messages.
  const std::string& undefined_hint() const { return str_; }
  ValueList& as_list() const { return *list_; }
  ValueDict& as_dict() const { return *dict_; }
  const Callable& as_callable() const { return *callable_; }

  // Python truthiness; Undefined is false.
  bool truthy() const;
  // str(value) as Jinja prints it: None -> "None", True -> "True", lists and dicts as Python repr.
  std::string to_output() const;
  // repr(value), used inside printed lists and dicts.
  std::string repr() const;
  // Python's `==` (1 == 1.0 == True; lists and dicts compare deeply).
  bool equals(const Value& other) const;
  std::string type_name() const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}
  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;  // kBool, kInt
  double float_ = 0;
  std::string str_;  // kString; the variable name for kUndefined
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const Callable> callable_;
};

// Python's float repr: shortest round-tripping digits, always with a '.' or exponent.
std::string python_float_repr(double value);

// transformers' tojson: json.dumps(ensure_ascii=False, indent=indent, sort_keys=sort_keys) with
// Python's default ", " / ": " separators when not indenting.
std::string to_json(const Value& value, int indent, bool sort_keys);

// UTF-8 helpers: Python strings index code points, so length/slicing/indexing go through these.
std::vector<std::string> utf8_code_points(const std::string& s);

}  // namespace salvo::jinja
