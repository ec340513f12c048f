// Python semantics the templates lean on: attribute and item lookup, iteration, ordering, str and
// dict methods, and the global functions transformers provides (raise_exception, strftime_now)
// plus Jinja's (range, namespace, dict).
#include <algorithm>
#include <ctime>

#include "chat/jinja_render.h"

namespace salvo::jinja {
namespace {

[[noreturn]] void fail(const std::string& message) { throw JinjaError(kNoPos, message); }

const std::string& string_arg(const Value& v, const char* what) {
  if (!v.is_string()) fail(std::string(what) + " must be a string, not " + v.type_name());
  return v.as_string();
}

// Decodes the code point starting at s[i] (invalid bytes decode as themselves) and its length.
uint32_t decode_at(const std::string& s, size_t i, size_t* len) {
  unsigned char c = s[i];
  uint32_t cp = c;
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
  if (i + n > s.size()) n = 1;
  if (n > 1) {
    cp = c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xc0) != 0x80) {
        n = 1;
        cp = c;
        break;
      }
      cp = (cp << 6) | (cc & 0x3f);
    }
  }
  *len = n;
  return cp;
}

// str.isspace() for the code points Python treats as whitespace.
bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

std::vector<std::string> split_whitespace(const std::string& s, int64_t max_split) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    while (i < s.size() && is_python_space(decode_at(s, i, &len))) i += len;
    if (i >= s.size()) break;
    if (max_split >= 0 && static_cast<int64_t>(out.size()) == max_split) {
      std::string rest = s.substr(i);
      out.push_back(python_strip(rest, Value::none(), false, true));
      break;
    }
    size_t start = i;
    while (i < s.size() && !is_python_space(decode_at(s, i, &len))) i += len;
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

std::vector<std::string> split_on(const std::string& s, const std::string& sep, int64_t max_split) {
  if (sep.empty()) fail("empty separator");
  std::vector<std::string> out;
  size_t start = 0;
  while (max_split < 0 || static_cast<int64_t>(out.size()) < max_split) {
    size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    out.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  out.push_back(s.substr(start));
  return out;
}

Value string_list(const std::vector<std::string>& parts) {
  ValueList items;
  for (const auto& p : parts) items.emplace_back(p);
  return Value::list(std::move(items));
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s)
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool starts_or_ends_with(const std::string& s, const Value& affix, bool at_start) {
  auto check = [&](const Value& v) {
    const std::string& a = string_arg(v, at_start ? "startswith argument" : "endswith argument");
    if (a.size() > s.size()) return false;
    return at_start ? s.compare(0, a.size(), a) == 0
                    : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(), check);
  }
  return check(affix);
}

Value string_method(const std::string& s, const std::string& name, ValueList& args,
                    KwArgs& kwargs) {
  static const Value kNone = Value::none();
  static const Value kMinusOne = Value(-1);
  if (name == "startswith" || name == "endswith") {
    if (args.empty()) fail(name + "() takes at least 1 argument");
    return starts_or_ends_with(s, args[0], name == "startswith");
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return python_strip(s, arg(args, kwargs, 0, "chars", kNone), name != "rstrip",
                        name != "lstrip");
  }
  if (name == "split" || name == "rsplit") {
    const Value& sep = arg(args, kwargs, 0, "sep", kNone);
    const Value& max_split = arg(args, kwargs, 1, "maxsplit", kMinusOne);
    int64_t m = max_split.is_int() ? max_split.as_int() : -1;
    if (name == "rsplit" && m >= 0) {
      if (sep.is_none()) fail("rsplit() with maxsplit and no separator is not supported");
      std::vector<std::string> all = split_on(s, string_arg(sep, "separator"), -1);
      if (static_cast<int64_t>(all.size()) <= m + 1) return string_list(all);
      size_t keep = all.size() - static_cast<size_t>(m);
      std::string head = all[0];
      for (size_t i = 1; i < keep; ++i) head += sep.as_string() + all[i];
      std::vector<std::string> out = {head};
      out.insert(out.end(), all.begin() + keep, all.end());
      return string_list(out);
    }
    if (sep.is_none()) return string_list(split_whitespace(s, m));
    return string_list(split_on(s, string_arg(sep, "separator"), m));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines = split_on(s, "\n", -1);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    for (auto& l : lines) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
    }
    return string_list(lines);
  }
  if (name == "upper" || name == "lower") return ascii_case(s, name == "upper");
  if (name == "title" || name == "capitalize") {
    ValueList none_args;
    KwArgs none_kwargs;
    return apply_filter(name, Value(s), none_args, none_kwargs);
  }
  if (name == "replace") {
    if (args.size() < 2) fail("replace() takes at least 2 arguments");
    ValueList filter_args(args.begin(), args.end());
    return apply_filter("replace", Value(s), filter_args, kwargs);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    if (args.empty()) fail(name + "() takes at least 1 argument");
    const std::string& needle = string_arg(args[0], "argument");
    if (name == "count") {
      if (needle.empty()) return static_cast<int64_t>(utf8_code_points(s).size() + 1);
      int64_t n = 0;
      for (size_t at = s.find(needle); at != std::string::npos;
           at = s.find(needle, at + needle.size()))
        ++n;
      return n;
    }
    size_t at = name == "rfind" ? s.rfind(needle) : s.find(needle);
    if (at == std::string::npos) {
      if (name == "index") fail("substring not found");
      return -1;
    }
    return static_cast<int64_t>(utf8_code_points(s.substr(0, at)).size());
  }
  if (name == "join") {
    if (args.empty()) fail("join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(args[0])) {
      if (!first) out += s;
      out += string_arg(v, "join item");
      first = false;
    }
    return out;
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "islower" || name == "isupper") {
    if (s.empty()) return false;
    if (name == "islower" || name == "isupper") {
      bool cased = false;
      for (unsigned char c : s) {
        if (std::isalpha(c)) {
          cased = true;
          if ((name == "islower") != static_cast<bool>(std::islower(c))) return false;
        }
      }
      return cased;
    }
    size_t i = 0, len;
    while (i < s.size()) {
      uint32_t cp = decode_at(s, i, &len);
      bool ok = name == "isspace"   ? is_python_space(cp)
                : name == "isdigit" ? (cp < 128 && std::isdigit(static_cast<int>(cp)))
                : name == "isalpha" ? (cp >= 128 || std::isalpha(static_cast<int>(cp)))
                                    : (cp >= 128 || std::isalnum(static_cast<int>(cp)));
      if (!ok) return false;
      i += len;
    }
    return true;
  }
  fail("'str' object has no attribute '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name, ValueList& args, KwArgs& kwargs) {
  const ValueDict& dict = d.as_dict();
  if (name == "get") {
    if (args.empty()) fail("get() takes at least 1 argument");
    const Value* v = args[0].is_string() ? dict.find(args[0].as_string()) : nullptr;
    if (v) return *v;
    return args.size() > 1 ? args[1] : Value::none();
  }
  if (name == "items" || name == "keys" || name == "values") {
    ValueList out;
    for (const auto& [k, v] : dict.items) {
      if (name == "items")
        out.push_back(Value::list({Value(k), v}));
      else if (name == "keys")
        out.emplace_back(k);
      else
        out.push_back(v);
    }
    return Value::list(std::move(out));
  }
  fail("'dict' object has no attribute '" + name + "'");
}

std::string strftime_now(const std::string& format) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
  return std::string(buf, n);
}

}  // namespace

std::string python_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<std::string> set;
  if (!chars.is_none() && !chars.is_undefined())
    set = utf8_code_points(string_arg(chars, "strip chars"));
  std::vector<std::string> cps = utf8_code_points(s);
  auto strip_it = [&](const std::string& cp) {
    if (chars.is_none() || chars.is_undefined()) {
      size_t len;
      return is_python_space(decode_at(cp, 0, &len));
    }
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(name)) return *v;
  }
  return Value::undefined(name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = object.as_dict().find(key.as_string())) return *v;
      return Value::undefined(key.as_string());
    }
    return Value::undefined();
  }
  if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (object.is_list()) {
      int64_t n = static_cast<int64_t>(object.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined();
      return object.as_list()[i];
    }
    std::vector<std::string> cps = utf8_code_points(object.as_string());
    int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined();
    return Value(cps[i]);
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined();
}

ValueList iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kList:
      return value.as_list();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, v] : value.as_dict().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (auto& c : utf8_code_points(value.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    case Value::Kind::kUndefined:
      return {};
    default:
      fail("'" + value.type_name() + "' object is not iterable");
  }
}

bool python_less(const Value& a, const Value& b) {
  bool a_num = a.is_number() || a.is_bool(), b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string())
    return a.as_string() < b.as_string();  // UTF-8 order = code point order
  if (a.is_list() && b.is_list()) {
    const ValueList &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!x[i].equals(y[i])) return python_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() +
       "'");
}

Value call_method(const Value& object, const std::string& name, ValueList& args, KwArgs& kwargs) {
  if (object.is_string()) return string_method(object.as_string(), name, args, kwargs);
  if (object.is_dict() && !object.as_dict().is_namespace)
    return dict_method(object, name, args, kwargs);
  if (object.is_list() &&
      (name == "append" || name == "pop" || name == "insert" || name == "extend" ||
       name == "remove" || name == "clear" || name == "sort" || name == "reverse")) {
    // transformers renders in an ImmutableSandboxedEnvironment, which refuses these too.
    fail("list." + name + "() is not allowed: templates cannot modify lists");
  }
  if (object.is_list() && (name == "index" || name == "count")) {
    if (args.empty()) fail(name + "() takes exactly one argument");
    int64_t count = 0;
    const ValueList& items = object.as_list();
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].equals(args[0])) {
        if (name == "index") return static_cast<int64_t>(i);
        ++count;
      }
    }
    if (name == "index") fail("value is not in list");
    return count;
  }
  fail("'" + object.type_name() + "' object has no attribute '" + name + "'");
}

void add_global_functions(ValueDict& globals) {
  globals.set("range", Value::callable("range", [](ValueList& args, KwArgs&) -> Value {
                if (args.empty() || args.size() > 3) fail("range expected 1 to 3 arguments");
                for (const Value& a : args) {
                  if (!a.is_int()) fail("range() arguments must be integers");
                }
                int64_t start = args.size() == 1 ? 0 : args[0].as_int();
                int64_t stop = args.size() == 1 ? args[0].as_int() : args[1].as_int();
                int64_t step = args.size() == 3 ? args[2].as_int() : 1;
                if (step == 0) fail("range() arg 3 must not be zero");
                // Jinja's sandbox caps range() at 100000 items (MAX_RANGE).
                constexpr int64_t kMaxRange = 100000;
                ValueList items;
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                  if (static_cast<int64_t>(items.size()) >= kMaxRange) fail("range too big");
                  items.emplace_back(i);
                }
                return Value::list(std::move(items));
              }));
  globals.set("namespace",
              Value::callable("namespace", [](ValueList& args, KwArgs& kwargs) -> Value {
                Value ns = Value::namespace_object();
                for (const Value& a : args) {
                  if (!a.is_dict()) fail("namespace() positional arguments must be dicts");
                  for (const auto& [k, v] : a.as_dict().items) ns.as_dict().set(k, v);
                }
                for (const auto& [k, v] : kwargs) ns.as_dict().set(k, v);
                return ns;
              }));
  globals.set("dict", Value::callable("dict", [](ValueList& args, KwArgs& kwargs) -> Value {
                Value d = Value::dict();
                for (const Value& a : args) {
                  if (!a.is_dict()) fail("dict() positional arguments must be dicts");
                  for (const auto& [k, v] : a.as_dict().items) d.as_dict().set(k, v);
                }
                for (const auto& [k, v] : kwargs) d.as_dict().set(k, v);
                return d;
              }));
  globals.set("raise_exception",
              Value::callable("raise_exception", [](ValueList& args, KwArgs&) -> Value {
                fail(args.empty() ? std::string("raise_exception() called") : args[0].to_output());
              }));
  globals.set("strftime_now",
              Value::callable("strftime_now", [](ValueList& args, KwArgs&) -> Value {
                if (args.empty()) fail("strftime_now() takes a format argument");
                return strftime_now(string_arg(args[0], "format"));
              }));
}

}  // namespace salvo::jinja
