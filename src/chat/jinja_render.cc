// Tree-walking renderer. Scoping follows Jinja: a for loop's body is its own scope (a `set` inside
// it does not leak out, which is why templates carry state in namespace() objects), `if` bodies
// share the enclosing scope, and a macro call sees the template's top-level names plus its
// parameters.
#include "chat/jinja_render.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>

namespace salvo::jinja {
namespace {

using Scope = std::shared_ptr<ValueDict>;

class Renderer {
 public:
  Renderer(const ValueDict& variables, const RenderLimits& limits) : limits_(limits) {
    auto root = std::make_shared<ValueDict>();
    add_global_functions(*root);
    for (const auto& [k, v] : variables.items) root->set(k, v);
    scopes_.push_back(root);
  }

  std::string run(const NodeList& body) {
    std::string out;
    render_nodes(body, out);
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  struct DepthGuard {
    DepthGuard(Renderer* r, SourcePos pos) : renderer(r) {
      if (++renderer->depth_ > renderer->limits_.max_depth) {
        throw JinjaError(pos, "template nesting exceeds the limit of " +
                                  std::to_string(renderer->limits_.max_depth));
      }
    }
    ~DepthGuard() { --renderer->depth_; }
    Renderer* renderer;
  };

  void step(SourcePos pos) {
    if (++steps_ > limits_.max_steps) {
      throw JinjaError(pos, "template exceeded the evaluation limit of " +
                                std::to_string(limits_.max_steps) + " steps");
    }
  }

  void check_size(size_t size, SourcePos pos) const {
    if (size > limits_.max_output_bytes) {
      throw JinjaError(pos, "output exceeds the limit of " +
                                std::to_string(limits_.max_output_bytes) + " bytes");
    }
  }

  void emit(std::string& out, const std::string& text, SourcePos pos) {
    check_size(out.size() + text.size(), pos);
    out += text;
  }

  // ---- variables ----

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (const Value* v = (*it)->find(name)) return *v;
    }
    return Value::undefined(name);
  }

  void assign(const std::string& name, Value value) { scopes_.back()->set(name, std::move(value)); }

  void assign_targets(const std::vector<std::string>& targets, const Value& value, SourcePos pos) {
    if (targets.size() == 1) {
      assign(targets[0], value);
      return;
    }
    ValueList items = iterate(value);
    if (items.size() != targets.size()) {
      throw JinjaError(pos, "cannot unpack " + std::to_string(items.size()) + " values into " +
                                std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
  }

  // ---- statements ----

  Flow render_nodes(const NodeList& nodes, std::string& out) {
    for (const auto& node : nodes) {
      Flow flow = render_node(*node, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow render_node(const Node& node, std::string& out) {
    step(node.pos);
    switch (node.kind) {
      case Node::Kind::kText:
        emit(out, node.text, node.pos);
        return Flow::kNormal;
      case Node::Kind::kOutput:
        emit(out, eval(*node.exprs[0]).to_output(), node.pos);
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (size_t i = 0; i < node.exprs.size(); ++i) {
          if (eval(*node.exprs[i]).truthy()) return render_nodes(node.bodies[i], out);
        }
        if (node.bodies.size() > node.exprs.size()) return render_nodes(node.bodies.back(), out);
        return Flow::kNormal;
      case Node::Kind::kFor:
        render_for(node, out);
        return Flow::kNormal;
      case Node::Kind::kSet:
        render_set(node);
        return Flow::kNormal;
      case Node::Kind::kSetBlock: {
        std::string captured;
        render_nodes(node.bodies[0], captured);
        assign(node.targets[0], Value(std::move(captured)));
        return Flow::kNormal;
      }
      case Node::Kind::kMacro:
        define_macro(node);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kGeneration:
        return render_nodes(node.bodies[0], out);
      case Node::Kind::kFilterBlock: {
        std::string captured;
        render_nodes(node.bodies[0], captured);
        hole_value_ = Value(std::move(captured));
        emit(out, eval(*node.exprs[0]).to_output(), node.pos);
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  void render_set(const Node& node) {
    Value value = eval(*node.exprs[0]);
    if (node.attribute_target.empty()) {
      assign_targets(node.targets, value, node.pos);
      return;
    }
    Value target = lookup(node.targets[0]);
    if (!target.is_dict() || !target.as_dict().is_namespace) {
      throw JinjaError(node.pos,
                       "cannot assign attribute on non-namespace object '" + node.targets[0] + "'");
    }
    target.as_dict().set(node.attribute_target, std::move(value));
  }

  void render_for(const Node& node, std::string& out) {
    DepthGuard guard(this, node.pos);
    Value iterable = eval(*node.exprs[0]);
    if (iterable.is_none() || iterable.is_number() || iterable.is_bool() ||
        iterable.is_callable()) {
      throw JinjaError(node.exprs[0]->pos, "'" + iterable.type_name() + "' object is not iterable");
    }
    ValueList items = iterate(iterable);
    scopes_.push_back(std::make_shared<ValueDict>());
    if (node.exprs.size() > 1) {  // {% for x in xs if cond %}: filtered before loop.length is known
      ValueList kept;
      for (const Value& item : items) {
        assign_targets(node.targets, item, node.pos);
        if (eval(*node.exprs[1]).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    // One loop object per loop, updated in place: iterations stay cheap, which matters because
    // the step limit is what bounds a hostile `range()` nest.
    auto index = std::make_shared<int64_t>(0);
    Value loop = Value::dict();
    ValueDict& d = loop.as_dict();
    for (const char* key : {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                            "previtem", "nextitem", "depth", "depth0"}) {
      d.items.emplace_back(key, Value());
    }
    d.items.emplace_back("cycle",
                         Value::callable("cycle", [index](ValueList& args, KwArgs&) -> Value {
                           if (args.empty())
                             throw JinjaError(kNoPos, "loop.cycle() needs at least one argument");
                           return args[static_cast<size_t>(*index) % args.size()];
                         }));
    for (int64_t i = 0; i < n; ++i) {
      step(node.pos);
      *index = i;
      auto& f = d.items;
      f[0].second = Value(i + 1);
      f[1].second = Value(i);
      f[2].second = Value(n - i);
      f[3].second = Value(n - i - 1);
      f[4].second = Value(i == 0);
      f[5].second = Value(i == n - 1);
      f[6].second = Value(n);
      f[7].second = i > 0 ? items[i - 1] : Value::undefined("previtem");
      f[8].second = i + 1 < n ? items[i + 1] : Value::undefined("nextitem");
      f[9].second = Value(1);
      f[10].second = Value(0);
      assign("loop", loop);
      assign_targets(node.targets, items[i], node.pos);
      if (render_nodes(node.bodies[0], out) == Flow::kBreak) break;
    }
    scopes_.pop_back();
    if (n == 0 && node.bodies.size() > 1) render_nodes(node.bodies[1], out);
  }

  void define_macro(const Node& node) {
    const Node* macro = &node;
    assign(node.targets[0],
           Value::callable(node.targets[0], [this, macro](ValueList& args, KwArgs& kwargs) {
             return call_macro(*macro, args, kwargs);
           }));
  }

  Value call_macro(const Node& macro, ValueList& args, KwArgs& kwargs) {
    DepthGuard guard(this, macro.pos);
    if (args.size() > macro.params.size()) {
      throw JinjaError(kNoPos, "macro '" + macro.targets[0] + "' takes " +
                                   std::to_string(macro.params.size()) + " arguments, got " +
                                   std::to_string(args.size()));
    }
    // Defaults are evaluated in the caller's scopes, before switching to the macro's.
    auto frame = std::make_shared<ValueDict>();
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const MacroParam& p = macro.params[i];
      Value v;
      bool found = false;
      if (i < args.size()) {
        v = args[i];
        found = true;
      }
      for (auto& [k, kv] : kwargs) {
        if (k == p.name) {
          v = kv;
          found = true;
        }
      }
      if (!found) v = p.default_value ? eval(*p.default_value) : Value::undefined(p.name);
      frame->set(p.name, v);
    }
    std::vector<Scope> saved = {scopes_[0], frame};
    std::swap(saved, scopes_);
    std::string out;
    try {
      render_nodes(macro.bodies[0], out);
    } catch (...) {
      std::swap(saved, scopes_);
      throw;
    }
    std::swap(saved, scopes_);
    return Value(std::move(out));
  }

  // ---- expressions ----

  [[noreturn]] static void undefined_error(const Value& v, SourcePos pos) {
    throw JinjaError(pos, v.undefined_hint().empty() ? std::string("value is undefined")
                                                     : "'" + v.undefined_hint() + "' is undefined");
  }

  Value eval(const Expr& e) {
    step(e.pos);
    DepthGuard guard(this, e.pos);
    try {
      return eval_inner(e);
    } catch (const JinjaError& err) {
      if (err.pos().line != 0) throw;
      throw JinjaError(e.pos, err.what());
    }
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        ValueList items;
        for (const auto& c : e.children) items.push_back(eval(*c));
        return Value::list(std::move(items));
      }
      case Expr::Kind::kDict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value key = eval(*e.children[i]);
          if (!key.is_string()) throw JinjaError(e.children[i]->pos, "dict keys must be strings");
          d.as_dict().set(key.as_string(), eval(*e.children[i + 1]));
        }
        return d;
      }
      case Expr::Kind::kUnary:
        return eval_unary(e);
      case Expr::Kind::kBinary:
        return eval_binary(e);
      case Expr::Kind::kCompare:
        return eval_compare(e);
      case Expr::Kind::kConditional:
        if (eval(*e.children[1]).truthy()) return eval(*e.children[0]);
        return e.children[2] ? eval(*e.children[2]) : Value::undefined();
      case Expr::Kind::kAttribute: {
        Value object = eval(*e.children[0]);
        if (object.is_undefined()) undefined_error(object, e.pos);
        return get_attribute(object, e.name);
      }
      case Expr::Kind::kSubscript: {
        Value object = eval(*e.children[0]);
        if (object.is_undefined()) undefined_error(object, e.pos);
        return get_item(object, eval(*e.children[1]));
      }
      case Expr::Kind::kSlice:
        return eval_slice(e);
      case Expr::Kind::kCall:
        return eval_call(e);
      case Expr::Kind::kFilter: {
        Value input = e.children[0]->kind == Expr::Kind::kLiteral &&
                              e.children[0]->literal.is_undefined() && !hole_value_.is_undefined()
                          ? hole_value_
                          : eval(*e.children[0]);
        auto [args, kwargs] = eval_args(e);
        Value result = apply_filter(e.name, input, args, kwargs);
        if (result.is_string()) check_size(result.as_string().size(), e.pos);
        return result;
      }
      case Expr::Kind::kTest: {
        Value input = eval(*e.children[0]);
        auto [args, kwargs] = eval_args(e);
        return apply_test(e.name, input, args) != e.negated;
      }
    }
    return Value::undefined();
  }

  std::pair<ValueList, KwArgs> eval_args(const Expr& e) {
    ValueList args;
    KwArgs kwargs;
    for (size_t i = 1; i < e.children.size(); ++i) args.push_back(eval(*e.children[i]));
    for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, eval(*v));
    return {std::move(args), std::move(kwargs)};
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.children[0];
    if (callee.kind == Expr::Kind::kAttribute) {
      Value object = eval(*callee.children[0]);
      if (object.is_undefined()) undefined_error(object, callee.pos);
      auto [args, kwargs] = eval_args(e);
      if (object.is_dict()) {
        if (const Value* member = object.as_dict().find(callee.name);
            member && member->is_callable()) {
          return member->as_callable().fn(args, kwargs);
        }
      }
      Value result = call_method(object, callee.name, args, kwargs);
      if (result.is_string()) check_size(result.as_string().size(), e.pos);
      return result;
    }
    Value fn = eval(callee);
    if (fn.is_undefined()) undefined_error(fn, callee.pos);
    if (!fn.is_callable())
      throw JinjaError(e.pos, "'" + fn.type_name() + "' object is not callable");
    auto [args, kwargs] = eval_args(e);
    return fn.as_callable().fn(args, kwargs);
  }

  Value eval_unary(const Expr& e) {
    Value v = eval(*e.children[0]);
    if (e.name == "not") return !v.truthy();
    if (v.is_undefined()) undefined_error(v, e.pos);
    if (!v.is_number() && !v.is_bool()) {
      throw JinjaError(e.pos, "bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
    }
    if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
    return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value left = eval(*e.children[0]);
      return left.truthy() ? eval(*e.children[1]) : left;
    }
    if (op == "or") {
      Value left = eval(*e.children[0]);
      return left.truthy() ? left : eval(*e.children[1]);
    }
    Value a = eval(*e.children[0]);
    Value b = eval(*e.children[1]);
    if (op == "~") {
      check_size(a.to_output().size() + b.to_output().size(), e.pos);
      return Value(a.to_output() + b.to_output());
    }
    if (a.is_undefined()) undefined_error(a, e.children[0]->pos);
    if (b.is_undefined()) undefined_error(b, e.children[1]->pos);
    auto type_error = [&]() -> JinjaError {
      return JinjaError(e.pos, "unsupported operand type(s) for " + op + ": '" + a.type_name() +
                                   "' and '" + b.type_name() + "'");
    };
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        check_size(a.as_string().size() + b.as_string().size(), e.pos);
        return Value(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list()) {
        ValueList items = a.as_list();
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(items));
      }
    }
    bool repeat = ((a.is_string() || a.is_list()) && b.is_int()) ||
                  ((b.is_string() || b.is_list()) && a.is_int());
    if (op == "*" && repeat) {
      const Value& seq = a.is_int() ? b : a;
      int64_t count = std::max<int64_t>(0, a.is_int() ? a.as_int() : b.as_int());
      size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size() * 16;
      if (unit > 0 && static_cast<uint64_t>(count) > limits_.max_output_bytes / unit)
        check_size(SIZE_MAX, e.pos);
      if (seq.is_string()) {
        std::string out;
        for (int64_t i = 0; i < count; ++i) out += seq.as_string();
        return Value(std::move(out));
      }
      ValueList items;
      for (int64_t i = 0; i < count; ++i)
        items.insert(items.end(), seq.as_list().begin(), seq.as_list().end());
      return Value::list(std::move(items));
    }
    bool numeric = (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool());
    if (!numeric) throw type_error();
    bool as_float = a.is_float() || b.is_float();
    if (op == "/") {
      if (b.as_double() == 0) throw JinjaError(e.pos, "division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (op == "**") {
      if (!as_float && b.as_int() >= 0) {
        double r = std::pow(a.as_double(), b.as_double());
        if (std::fabs(r) > 9.2e18) throw JinjaError(e.pos, "integer overflow in **");
        int64_t result = 1;
        for (int64_t i = 0; i < b.as_int(); ++i) result *= a.as_int();
        return Value(result);
      }
      return Value(std::pow(a.as_double(), b.as_double()));
    }
    if (as_float) {
      double x = a.as_double(), y = b.as_double();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (y == 0) throw JinjaError(e.pos, "division by zero");
      if (op == "//") return Value(std::floor(x / y));
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    if (op == "+" || op == "-" || op == "*") {
      bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                      : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                  : __builtin_mul_overflow(x, y, &r);
      if (overflow) throw JinjaError(e.pos, "integer overflow");
      return Value(r);
    }
    if (y == 0) throw JinjaError(e.pos, "integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) throw JinjaError(e.pos, "integer overflow");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return Value(op == "//" ? q : m);
  }

  bool contains(const Value& container, const Value& item, SourcePos pos) {
    if (container.is_string()) {
      if (!item.is_string()) {
        throw JinjaError(pos,
                         "'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    }
    if (container.is_list()) {
      for (const Value& v : container.as_list()) {
        if (v.equals(item)) return true;
      }
      return false;
    }
    if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string());
    if (container.is_undefined()) return false;
    throw JinjaError(pos, "argument of type '" + container.type_name() + "' is not iterable");
  }

  Value eval_compare(const Expr& e) {
    Value left = eval(*e.children[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.children[i + 1]);
      const std::string& op = e.ops[i];
      bool ok;
      if (op == "==") {
        ok = left.equals(right);
      } else if (op == "!=") {
        ok = !left.equals(right);
      } else if (op == "in") {
        ok = contains(right, left, e.pos);
      } else if (op == "not in") {
        ok = !contains(right, left, e.pos);
      } else {
        try {
          if (op == "<")
            ok = python_less(left, right);
          else if (op == ">")
            ok = python_less(right, left);
          else if (op == "<=")
            ok = !python_less(right, left);
          else
            ok = !python_less(left, right);
        } catch (const JinjaError& err) {
          throw JinjaError(e.pos, err.what());
        }
      }
      if (!ok) return false;
      left = std::move(right);
    }
    return true;
  }

  Value eval_slice(const Expr& e) {
    Value object = eval(*e.children[0]);
    if (object.is_undefined()) undefined_error(object, e.pos);
    auto bound = [&](size_t i) -> std::optional<int64_t> {
      if (!e.children[i]) return std::nullopt;
      Value v = eval(*e.children[i]);
      if (v.is_none()) return std::nullopt;
      if (!v.is_int())
        throw JinjaError(e.children[i]->pos, "slice indices must be integers or None");
      return v.as_int();
    };
    std::optional<int64_t> start = bound(1), stop = bound(2), step_by = bound(3);
    int64_t st = step_by.value_or(1);
    if (st == 0) throw JinjaError(e.pos, "slice step cannot be zero");
    std::vector<std::string> chars;
    int64_t n;
    if (object.is_string()) {
      chars = utf8_code_points(object.as_string());
      n = static_cast<int64_t>(chars.size());
    } else if (object.is_list()) {
      n = static_cast<int64_t>(object.as_list().size());
    } else {
      throw JinjaError(e.pos, "'" + object.type_name() + "' object is not subscriptable");
    }
    // Python's slice.indices().
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + n : *v;
      if (st > 0) return std::clamp<int64_t>(x, 0, n);
      return std::clamp<int64_t>(x, -1, n - 1);
    };
    int64_t lo = clamp(start, st > 0 ? 0 : n - 1);
    int64_t hi = clamp(stop, st > 0 ? n : -1);
    std::string s;
    ValueList items;
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
      if (object.is_string()) {
        s += chars[i];
      } else {
        items.push_back(object.as_list()[i]);
      }
    }
    return object.is_string() ? Value(std::move(s)) : Value::list(std::move(items));
  }

  const RenderLimits& limits_;
  std::vector<Scope> scopes_;
  int depth_ = 0;
  uint64_t steps_ = 0;
  Value hole_value_;  // the captured body of a {% filter %} block
};

}  // namespace

std::string render_template(const ParsedTemplate& tmpl, const ValueDict& variables,
                            const RenderLimits& limits) {
  return Renderer(variables, limits).run(tmpl.body);
}

}  // namespace salvo::jinja
