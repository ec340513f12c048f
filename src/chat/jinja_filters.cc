// Jinja's built-in filters and tests that chat templates use, with Jinja's argument names and
// defaults; `tojson` is transformers' version (no HTML escaping, keys in insertion order).
#include <algorithm>
#include <cmath>
#include <set>

#include "chat/jinja_render.h"

namespace salvo::jinja {
namespace {

[[noreturn]] void fail(const std::string& message) { throw JinjaError(kNoPos, message); }

const std::set<std::string>& filter_names() {
  static const std::set<std::string> names = {
      "abs",    "attr",       "capitalize", "count",     "d",       "default", "dictsort",
      "e",      "escape",     "first",      "float",     "indent",  "int",     "items",
      "join",   "last",       "length",     "list",      "lower",   "map",     "max",
      "min",    "reject",     "rejectattr", "replace",   "reverse", "round",   "safe",
      "select", "selectattr", "sort",       "string",    "sum",     "title",   "tojson",
      "trim",   "unique",     "upper",      "wordcount", "center"};
  return names;
}

const std::set<std::string>& test_names() {
  static const std::set<std::string> names = {
      "boolean", "callable",  "defined", "divisibleby", "eq",          "equalto",  "escaped",
      "even",    "false",     "float",   "ge",          "greaterthan", "gt",       "in",
      "integer", "iterable",  "le",      "lessthan",    "lower",       "lt",       "mapping",
      "ne",      "none",      "number",  "odd",         "sameas",      "sequence", "string",
      "true",    "undefined", "upper",   "==",          "!=",          "<",        "<=",
      ">",       ">="};
  return names;
}

std::string case_map(const std::string& s, bool upper) {
  std::string out = s;
  for (char& c : out) {
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

int64_t length_of(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(utf8_code_points(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.as_list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  if (v.is_undefined()) return 0;
  fail("object of type '" + v.type_name() + "' has no len()");
}

// attribute="a.b" or an integer index, as Jinja's make_attrgetter resolves it.
Value get_path(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  if (!attribute.is_string()) fail("attribute must be a string or an integer");
  Value current = item;
  const std::string& path = attribute.as_string();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    current = numeric ? get_item(current, Value(static_cast<int64_t>(std::stoll(part))))
                      : get_item(current, Value(part));
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

bool sort_less(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is_string() && b.is_string()) {
    return case_map(a.as_string(), false) < case_map(b.as_string(), false);
  }
  return python_less(a, b);
}

// select/reject/selectattr/rejectattr: the test name and its extra arguments start at `first`.
ValueList select_items(const Value& input, ValueList& args, size_t first, const Value* attribute,
                       bool keep) {
  ValueList out;
  std::string test = first < args.size() ? args[first].to_output() : "";
  ValueList test_args(args.begin() + std::min(args.size(), first + 1), args.end());
  for (const Value& item : iterate(input)) {
    Value subject = attribute ? get_path(item, *attribute) : item;
    bool passed = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passed == keep) out.push_back(item);
  }
  return out;
}

Value round_value(const Value& v, int64_t precision, const std::string& method) {
  double x = v.as_double();
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = x * scale;
  double r;
  if (method == "ceil") {
    r = std::ceil(scaled);
  } else if (method == "floor") {
    r = std::floor(scaled);
  } else if (method == "common") {
    r = std::nearbyint(scaled);  // Python's round(): half to even
  } else {
    fail("round method must be 'common', 'ceil' or 'floor'");
  }
  return Value(r / scale);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

bool is_known_filter(const std::string& name) { return filter_names().count(name) > 0; }
bool is_known_test(const std::string& name) { return test_names().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, ValueList& args, KwArgs& kwargs) {
  static const Value kNone = Value::none();
  static const Value kFalse = Value(false);
  static const Value kEmpty = Value(std::string());
  auto require_string = [&](const Value& v) -> std::string {
    if (v.is_undefined()) return "";
    return v.to_output();
  };
  if (name == "trim")
    return python_strip(require_string(input), arg(args, kwargs, 0, "chars", kNone), true, true);
  if (name == "length" || name == "count") return length_of(input);
  if (name == "upper" || name == "lower") return case_map(require_string(input), name == "upper");
  if (name == "string") return input.to_output();
  if (name == "safe") return input;
  if (name == "e" || name == "escape") return html_escape(input.to_output());
  if (name == "tojson") {
    const Value& indent = arg(args, kwargs, 0, "indent", kNone);
    const Value& sort_keys = arg(args, kwargs, 4, "sort_keys", kFalse);
    return to_json(
        input, indent.is_int() ? static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64)) : -1,
        sort_keys.truthy());
  }
  if (name == "default" || name == "d") {
    const Value& fallback = arg(args, kwargs, 0, "default_value", kEmpty);
    bool boolean = arg(args, kwargs, 1, "boolean", kFalse).truthy();
    if (input.is_undefined() || (boolean && !input.truthy())) return fallback;
    return input;
  }
  if (name == "first" || name == "last") {
    ValueList items = iterate(input);
    if (items.empty()) return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const Value& sep = arg(args, kwargs, 0, "d", kEmpty);
    const Value& attribute = arg(args, kwargs, 1, "attribute", kNone);
    std::string out;
    bool first = true;
    for (const Value& item : iterate(input)) {
      if (!first) out += sep.to_output();
      out += (attribute.is_none() ? item : get_path(item, attribute)).to_output();
      first = false;
    }
    return out;
  }
  if (name == "replace") {
    std::string s = require_string(input);
    const std::string old_text = arg(args, kwargs, 0, "old", kEmpty).to_output();
    const std::string new_text = arg(args, kwargs, 1, "new", kEmpty).to_output();
    const Value& count = arg(args, kwargs, 2, "count", kNone);
    int64_t limit = count.is_int() ? count.as_int() : -1;
    std::string out;
    if (old_text.empty()) {  // Python inserts `new` between every code point and at both ends
      std::vector<std::string> cps = utf8_code_points(s);
      int64_t done = 0;
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (limit < 0 || done < limit) {
          out += new_text;
          ++done;
        }
        if (i < cps.size()) out += cps[i];
      }
      return out;
    }
    size_t start = 0;
    int64_t done = 0;
    while (limit < 0 || done < limit) {
      size_t at = s.find(old_text, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += new_text;
      start = at + old_text.size();
      ++done;
    }
    out.append(s, start, std::string::npos);
    return out;
  }
  if (name == "capitalize") {
    std::string s = case_map(require_string(input), false);
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return s;
  }
  if (name == "title") {
    // Jinja capitalizes each run that follows whitespace or one of -({[<.
    std::string s = require_string(input), out;
    bool word_start = true;
    for (char c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      bool boundary = std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
      out += static_cast<char>(boundary ? c : word_start ? std::toupper(u) : std::tolower(u));
      word_start = boundary;
    }
    return out;
  }
  if (name == "center") {
    std::string s = require_string(input);
    int64_t width = arg(args, kwargs, 0, "width", Value(80)).as_int();
    int64_t n = static_cast<int64_t>(utf8_code_points(s).size());
    if (width <= n || width > 100000) return s;
    int64_t total = width - n, left = total / 2 + (total & width & 1);
    return std::string(left, ' ') + s + std::string(total - left, ' ');
  }
  if (name == "indent") {
    const Value& width = arg(args, kwargs, 0, "width", Value(4));
    bool first = arg(args, kwargs, 1, "first", kFalse).truthy();
    bool blank = arg(args, kwargs, 2, "blank", kFalse).truthy();
    std::string pad = width.is_string()
                          ? width.as_string()
                          : std::string(std::clamp<int64_t>(width.as_int(), 0, 1000), ' ');
    std::string s = require_string(input) + "\n";
    std::vector<std::string> lines;
    size_t start = 0;
    for (size_t at = s.find('\n'); at != std::string::npos; at = s.find('\n', start)) {
      lines.push_back(s.substr(start, at - start));
      start = at + 1;
    }
    std::string out = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (blank || !lines[i].empty()) out += pad;
      out += lines[i];
    }
    return first ? pad + out : out;
  }
  if (name == "wordcount") {
    std::string s = require_string(input);
    int64_t n = 0;
    bool in_word = false;
    for (unsigned char c : s) {
      bool word = std::isalnum(c) || c == '_' || c >= 0x80;
      if (word && !in_word) ++n;
      in_word = word;
    }
    return n;
  }
  if (name == "int") {
    const Value& fallback = arg(args, kwargs, 0, "default", Value(0));
    if (input.is_int() || input.is_bool()) return Value(input.as_int());
    if (input.is_float()) return Value(static_cast<int64_t>(input.as_double()));
    if (input.is_string()) {
      try {
        size_t used = 0;
        std::string t = python_strip(input.as_string(), kNone, true, true);
        long long v = std::stoll(t, &used, 10);
        if (used == t.size()) return Value(static_cast<int64_t>(v));
        double d = std::stod(t, &used);
        if (used == t.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
      } catch (...) {
      }
    }
    return fallback;
  }
  if (name == "float") {
    const Value& fallback = arg(args, kwargs, 0, "default", Value(0.0));
    if (input.is_number() || input.is_bool()) return Value(input.as_double());
    if (input.is_string()) {
      try {
        size_t used = 0;
        std::string t = python_strip(input.as_string(), kNone, true, true);
        double d = std::stod(t, &used);
        if (used == t.size()) return Value(d);
      } catch (...) {
      }
    }
    return fallback;
  }
  if (name == "abs") {
    if (input.is_float()) return std::fabs(input.as_double());
    if (input.is_int() || input.is_bool())
      return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
    fail("bad operand type for abs(): '" + input.type_name() + "'");
  }
  if (name == "round") {
    if (!input.is_number() && !input.is_bool()) fail("round filter needs a number");
    return round_value(input, arg(args, kwargs, 0, "precision", Value(0)).as_int(),
                       arg(args, kwargs, 1, "method", Value("common")).to_output());
  }
  if (name == "list") return Value::list(iterate(input));
  if (name == "items") {
    if (input.is_undefined()) return Value::list();
    if (!input.is_dict()) fail("items filter needs a mapping, got " + input.type_name());
    ValueList out;
    for (const auto& [k, v] : input.as_dict().items) out.push_back(Value::list({Value(k), v}));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    if (!input.is_dict()) fail("dictsort filter needs a mapping, got " + input.type_name());
    bool case_sensitive = arg(args, kwargs, 0, "case_sensitive", kFalse).truthy();
    bool by_value = arg(args, kwargs, 1, "by", Value("key")).to_output() == "value";
    bool reverse = arg(args, kwargs, 2, "reverse", kFalse).truthy();
    ValueList out;
    for (const auto& [k, v] : input.as_dict().items) out.push_back(Value::list({Value(k), v}));
    std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
      size_t i = by_value ? 1 : 0;
      return reverse ? sort_less(b.as_list()[i], a.as_list()[i], case_sensitive)
                     : sort_less(a.as_list()[i], b.as_list()[i], case_sensitive);
    });
    return Value::list(std::move(out));
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    ValueList items = iterate(input);
    bool reverse = name == "sort" && arg(args, kwargs, 0, "reverse", kFalse).truthy();
    bool case_sensitive =
        arg(args, kwargs, name == "sort" ? 1 : 0, "case_sensitive", kFalse).truthy();
    const Value& attribute = arg(args, kwargs, name == "sort" ? 2 : 1, "attribute", kNone);
    auto key = [&](const Value& v) { return attribute.is_none() ? v : get_path(v, attribute); };
    if (name == "unique") {
      ValueList out;
      for (const Value& item : items) {
        Value k = key(item);
        bool seen = std::any_of(out.begin(), out.end(), [&](const Value& o) {
          Value ok = key(o);
          return !case_sensitive && ok.is_string() && k.is_string()
                     ? case_map(ok.as_string(), false) == case_map(k.as_string(), false)
                     : ok.equals(k);
        });
        if (!seen) out.push_back(item);
      }
      return Value::list(std::move(out));
    }
    auto less = [&](const Value& a, const Value& b) {
      return sort_less(key(a), key(b), case_sensitive);
    };
    if (name == "min" || name == "max") {
      if (items.empty()) return Value::undefined(name);
      return name == "min" ? *std::min_element(items.begin(), items.end(), less)
                           : *std::max_element(items.begin(), items.end(), less);
    }
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      return reverse ? less(b, a) : less(a, b);
    });
    return Value::list(std::move(items));
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::vector<std::string> cps = utf8_code_points(input.as_string());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return out;
    }
    ValueList items = iterate(input);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "sum") {
    const Value& attribute = arg(args, kwargs, 0, "attribute", kNone);
    Value total = arg(args, kwargs, 1, "start", Value(0));
    for (const Value& item : iterate(input)) {
      Value v = attribute.is_none() ? item : get_path(item, attribute);
      if (!(v.is_number() || v.is_bool()) || !(total.is_number() || total.is_bool()))
        fail("sum needs numbers");
      total = total.is_float() || v.is_float() ? Value(total.as_double() + v.as_double())
                                               : Value(total.as_int() + v.as_int());
    }
    return total;
  }
  if (name == "attr") {
    if (args.empty()) fail("attr filter needs a name");
    return get_attribute(input, args[0].to_output());
  }
  if (name == "map") {
    ValueList out;
    const Value* attribute = nullptr;
    for (const auto& [k, v] : kwargs) {
      if (k == "attribute") attribute = &v;
    }
    if (attribute) {
      const Value& fallback = arg({}, kwargs, 0, "default", Value::undefined());
      for (const Value& item : iterate(input)) {
        Value v = get_path(item, *attribute);
        out.push_back(v.is_undefined() ? fallback : v);
      }
      return Value::list(std::move(out));
    }
    if (args.empty()) fail("map filter needs a filter name or attribute=");
    std::string filter = args[0].to_output();
    if (!is_known_filter(filter)) fail("unknown filter '" + filter + "'");
    ValueList rest(args.begin() + 1, args.end());
    for (const Value& item : iterate(input)) {
      ValueList a = rest;
      KwArgs k;
      out.push_back(apply_filter(filter, item, a, k));
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject") {
    return Value::list(select_items(input, args, 0, nullptr, name == "select"));
  }
  if (name == "selectattr" || name == "rejectattr") {
    if (args.empty()) fail(name + " needs an attribute name");
    return Value::list(select_items(input, args, 1, &args[0], name == "selectattr"));
  }
  fail("unknown filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& input, ValueList& args) {
  auto other = [&]() -> const Value& {
    if (args.empty()) fail("test '" + name + "' needs an argument");
    return args[0];
  };
  if (name == "defined") return !input.is_undefined();
  if (name == "undefined") return input.is_undefined();
  if (name == "none") return input.is_none();
  if (name == "string") return input.is_string();
  if (name == "boolean") return input.is_bool();
  if (name == "true") return input.is_bool() && input.as_bool();
  if (name == "false") return input.is_bool() && !input.as_bool();
  if (name == "integer") return input.is_int();
  if (name == "float") return input.is_float();
  if (name == "number") return input.is_number() || input.is_bool();
  if (name == "mapping") return input.is_dict() && !input.as_dict().is_namespace;
  if (name == "iterable")
    return input.is_list() || input.is_string() || input.is_undefined() ||
           (input.is_dict() && !input.as_dict().is_namespace);
  if (name == "sequence")
    return input.is_list() || input.is_string() ||
           (input.is_dict() && !input.as_dict().is_namespace);
  if (name == "callable") return input.is_callable();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    if (!input.is_string()) return false;
    ValueList none;
    KwArgs kw;
    return call_method(input, name == "lower" ? "islower" : "isupper", none, kw).truthy();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!input.is_int() && !input.is_bool()) fail("test '" + name + "' needs an integer");
    int64_t v = input.as_int();
    if (name == "divisibleby") {
      const Value& d = other();
      if (!d.is_int() || d.as_int() == 0) fail("divisibleby needs a non-zero integer");
      return v % d.as_int() == 0;
    }
    return (v % 2 != 0) == (name == "odd");
  }
  if (name == "eq" || name == "equalto" || name == "==") return input.equals(other());
  if (name == "ne" || name == "!=") return !input.equals(other());
  if (name == "sameas") {
    const Value& o = other();
    if (input.kind() != o.kind()) return false;
    if (input.is_list()) return &input.as_list() == &o.as_list();
    if (input.is_dict()) return &input.as_dict() == &o.as_dict();
    return input.equals(o);
  }
  if (name == "lt" || name == "lessthan" || name == "<") return python_less(input, other());
  if (name == "gt" || name == "greaterthan" || name == ">") return python_less(other(), input);
  if (name == "le" || name == "<=") return !python_less(other(), input);
  if (name == "ge" || name == ">=") return !python_less(input, other());
  if (name == "in") {
    const Value& c = other();
    if (c.is_string())
      return input.is_string() && c.as_string().find(input.as_string()) != std::string::npos;
    if (c.is_dict()) return input.is_string() && c.as_dict().find(input.as_string());
    for (const Value& v : iterate(c)) {
      if (v.equals(input)) return true;
    }
    return false;
  }
  fail("unknown test '" + name + "'");
}

Value arg(const ValueList& args, const KwArgs& kwargs, size_t index, const char* name,
          const Value& fallback) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return index < args.size() ? args[index] : fallback;
}

}  // namespace salvo::jinja
