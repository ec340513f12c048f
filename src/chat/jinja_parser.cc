// Recursive-descent parser over the lexer's tokens. Expression precedence follows Jinja's parser
// (jinja2/parser.py), lowest first: conditional `a if c else b`, or, and, not, comparisons and
// `in` (chained), + -, ~, * / // %, **, unary - +, then primary with postfix `.attr`, `[i]`,
// `[a:b]`, calls, `| filter` and `is test`.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "chat/jinja_ast.h"

namespace salvo::jinja {
namespace {

// Deep enough for any real template; shallow enough that a hostile `((((...` cannot exhaust the
// stack of a server thread.
constexpr int kMaxNesting = 100;
// Left-associative chains (`a + b + c ...`, `x.a.b.c ...`) grow the tree without recursing in the
// parser; their height is bounded separately.
constexpr int kMaxExprHeight = 400;

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText:
      return "template text";
    case TokenKind::kVarBegin:
      return "'{{'";
    case TokenKind::kVarEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kEof:
      return "end of template";
    case TokenKind::kString:
      return "string literal";
    default:
      return "'" + t.text + "'";
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  std::unique_ptr<ParsedTemplate> run() {
    auto tmpl = std::make_unique<ParsedTemplate>();
    tmpl->body = parse_body({}, nullptr);
    if (cur().kind != TokenKind::kEof) fail("unexpected " + describe(cur()));
    return tmpl;
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(Parser* p) : parser(p) {
      if (++parser->depth_ > kMaxNesting) parser->fail("template nested too deeply");
    }
    ~DepthGuard() { --parser->depth_; }
    Parser* parser;
  };

  const Token& cur() const { return tokens_[index_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(index_ + ahead, tokens_.size() - 1)];
  }
  void advance() {
    if (index_ + 1 < tokens_.size()) ++index_;
  }
  [[noreturn]] void fail(const std::string& message) const { throw JinjaError(cur().pos, message); }

  bool is_op(const char* op) const {
    return cur().kind == TokenKind::kOperator && cur().text == op;
  }
  bool is_name(const char* name) const {
    return cur().kind == TokenKind::kName && cur().text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) fail("expected a name, got " + describe(cur()));
    std::string name = cur().text;
    advance();
    return name;
  }
  void expect_block_end() {
    if (cur().kind != TokenKind::kBlockEnd) fail("expected '%}', got " + describe(cur()));
    advance();
  }

  // Computes e's height from its children once they are attached.
  ExprPtr seal(ExprPtr e) {
    int h = 0;
    for (const auto& c : e->children) {
      if (c) h = std::max(h, c->height);
    }
    for (const auto& kv : e->kwargs) h = std::max(h, kv.second->height);
    e->height = h + 1;
    if (e->height > kMaxExprHeight) throw JinjaError(e->pos, "expression nested too deeply");
    return e;
  }

  ExprPtr make(Expr::Kind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---- statements ----

  // Parses nodes until a block tag whose name is in `end_names` (left unconsumed: the stream
  // stays on that name). `opener` names the block being closed, for the unclosed-block error.
  NodeList parse_body(const std::set<std::string>& end_names, const Token* opener) {
    DepthGuard guard(this);
    NodeList body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::kEof) {
        if (opener) {
          throw JinjaError(opener->pos, "unclosed '" + opener->text + "' block: expected '" +
                                            *end_names.rbegin() + "' before end of template");
        }
        return body;
      }
      if (t.kind == TokenKind::kText) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->pos = t.pos;
        node->text = t.text;
        body.push_back(std::move(node));
        advance();
      } else if (t.kind == TokenKind::kVarBegin) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->pos = t.pos;
        advance();
        node->exprs.push_back(parse_tuple_or_expression());
        if (cur().kind != TokenKind::kVarEnd) fail("expected '}}', got " + describe(cur()));
        advance();
        body.push_back(std::move(node));
      } else if (t.kind == TokenKind::kBlockBegin) {
        advance();
        if (cur().kind != TokenKind::kName) fail("expected a tag name, got " + describe(cur()));
        if (end_names.count(cur().text)) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  // Consumes `name %}` of a closing tag the body parser stopped at.
  void close_tag() {
    advance();
    expect_block_end();
  }

  NodePtr parse_statement() {
    Token tag = cur();
    auto node = std::make_unique<Node>();
    node->pos = tag.pos;
    const std::string& name = tag.text;
    advance();
    if (name == "if") {
      node->kind = Node::Kind::kIf;
      node->exprs.push_back(parse_tuple_or_expression());
      expect_block_end();
      while (true) {
        node->bodies.push_back(parse_body({"elif", "else", "endif"}, &tag));
        if (is_name("elif")) {
          advance();
          node->exprs.push_back(parse_tuple_or_expression());
          expect_block_end();
        } else if (is_name("else")) {
          close_tag();
          node->bodies.push_back(parse_body({"endif"}, &tag));
          close_tag();
          break;
        } else {
          close_tag();
          break;
        }
      }
    } else if (name == "for") {
      node->kind = Node::Kind::kFor;
      node->targets = parse_target_names();
      if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
      node->exprs.push_back(parse_tuple_or_expression(/*allow_condition=*/false));
      if (skip_name("if")) node->exprs.push_back(parse_expression());
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      ++loop_depth_;
      node->bodies.push_back(parse_body({"else", "endfor"}, &tag));
      --loop_depth_;
      if (is_name("else")) {
        close_tag();
        node->bodies.push_back(parse_body({"endfor"}, &tag));
      }
      close_tag();
    } else if (name == "set") {
      parse_set(node.get(), tag);
    } else if (name == "macro") {
      node->kind = Node::Kind::kMacro;
      node->targets.push_back(expect_name());
      expect_op("(");
      while (!is_op(")")) {
        MacroParam param;
        param.name = expect_name();
        if (skip_op("=")) param.default_value = parse_expression();
        node->params.push_back(std::move(param));
        if (!skip_op(",")) break;
      }
      expect_op(")");
      expect_block_end();
      node->bodies.push_back(parse_body({"endmacro"}, &tag));
      close_tag();
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) throw JinjaError(tag.pos, "'" + name + "' outside of a for loop");
      node->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end();
    } else if (name == "generation") {
      node->kind = Node::Kind::kGeneration;
      expect_block_end();
      node->bodies.push_back(parse_body({"endgeneration"}, &tag));
      close_tag();
    } else if (name == "filter") {
      node->kind = Node::Kind::kFilterBlock;
      ExprPtr hole = make(Expr::Kind::kLiteral, tag.pos);
      node->exprs.push_back(parse_filter_chain(std::move(hole)));
      expect_block_end();
      node->bodies.push_back(parse_body({"endfilter"}, &tag));
      close_tag();
    } else if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
      throw JinjaError(tag.pos, "unexpected '" + name + "' with no open block to close");
    } else if (name == "include" || name == "extends" || name == "import" || name == "from" ||
               name == "block" || name == "call" || name == "with" || name == "do") {
      throw JinjaError(tag.pos, "unsupported tag '" + name + "'");
    } else {
      throw JinjaError(tag.pos, "unknown tag '" + name + "'");
    }
    return node;
  }

  void parse_set(Node* node, const Token& tag) {
    std::vector<std::string> names = parse_target_names();
    if (names.size() == 1 && skip_op(".")) {
      node->kind = Node::Kind::kSet;
      node->targets = names;
      node->attribute_target = expect_name();
      expect_op("=");
      node->exprs.push_back(parse_tuple_or_expression());
      expect_block_end();
      return;
    }
    node->targets = std::move(names);
    if (skip_op("=")) {
      node->kind = Node::Kind::kSet;
      node->exprs.push_back(parse_tuple_or_expression());
      expect_block_end();
      return;
    }
    if (node->targets.size() != 1) fail("expected '=' after set targets");
    node->kind = Node::Kind::kSetBlock;
    expect_block_end();
    node->bodies.push_back(parse_body({"endset"}, &tag));
    close_tag();
  }

  // `a`, `a, b` or `(a, b)`.
  std::vector<std::string> parse_target_names() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    do {
      names.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    for (const auto& n : names) {
      if (n == "loop" || n == "true" || n == "false" || n == "none")
        fail("cannot assign to '" + n + "'");
    }
    return names;
  }

  // ---- expressions ----

  // `a, b` at the top of {{ }} or {% set %} is a tuple, as in Jinja.
  ExprPtr parse_tuple_or_expression(bool allow_condition = true) {
    SourcePos pos = cur().pos;
    ExprPtr first = allow_condition ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::kTuple, pos);
    tuple->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == TokenKind::kBlockEnd || cur().kind == TokenKind::kVarEnd) break;
      tuple->children.push_back(allow_condition ? parse_expression() : parse_or());
    }
    return seal(std::move(tuple));
  }

  ExprPtr parse_expression() {
    DepthGuard guard(this);
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      SourcePos pos = cur().pos;
      advance();
      auto cond = make(Expr::Kind::kConditional, pos);
      cond->children.push_back(std::move(expr));
      cond->children.push_back(parse_or());
      cond->children.push_back(skip_name("else") ? parse_expression() : nullptr);
      expr = seal(std::move(cond));
    }
    return expr;
  }

  ExprPtr binary(std::string op, SourcePos pos, ExprPtr left, ExprPtr right) {
    auto e = make(Expr::Kind::kBinary, pos);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return seal(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      SourcePos pos = cur().pos;
      advance();
      left = binary("or", pos, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      SourcePos pos = cur().pos;
      advance();
      left = binary("and", pos, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(this);
      auto e = make(Expr::Kind::kUnary, cur().pos);
      advance();
      e->name = "not";
      e->children.push_back(parse_not());
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    SourcePos pos = cur().pos;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOperator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, pos);
        cmp->children.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->children.push_back(parse_math1());
    }
    return cmp ? seal(std::move(cmp)) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      SourcePos pos = cur().pos;
      advance();
      left = binary(op, pos, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      SourcePos pos = cur().pos;
      advance();
      left = binary("~", pos, std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      SourcePos pos = cur().pos;
      advance();
      left = binary(op, pos, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      SourcePos pos = cur().pos;
      advance();
      left = binary("**", pos, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(Expr::Kind::kUnary, cur().pos);
      node->name = cur().text;
      advance();
      node->children.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    SourcePos pos = t.pos;
    switch (t.kind) {
      case TokenKind::kName: {
        auto e = make(Expr::Kind::kLiteral, pos);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      }
      case TokenKind::kString: {
        std::string value;
        while (cur().kind == TokenKind::kString) {  // adjacent literals concatenate
          value += cur().text;
          advance();
        }
        auto e = make(Expr::Kind::kLiteral, pos);
        e->literal = Value(std::move(value));
        return e;
      }
      case TokenKind::kInteger: {
        errno = 0;
        long long v = std::strtoll(t.text.c_str(), nullptr, 10);
        if (errno == ERANGE) fail("integer literal out of range");
        auto e = make(Expr::Kind::kLiteral, pos);
        e->literal = Value(static_cast<int64_t>(v));
        advance();
        return e;
      }
      case TokenKind::kFloat: {
        auto e = make(Expr::Kind::kLiteral, pos);
        e->literal = Value(std::strtod(t.text.c_str(), nullptr));
        advance();
        return e;
      }
      case TokenKind::kOperator:
        if (t.text == "(") return parse_paren();
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail("unexpected " + describe(t) + " in expression");
  }

  ExprPtr parse_paren() {
    SourcePos pos = cur().pos;
    advance();
    if (skip_op(")")) return make(Expr::Kind::kTuple, pos);
    ExprPtr first = parse_expression();
    if (skip_op(")")) return first;
    auto tuple = make(Expr::Kind::kTuple, pos);
    tuple->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_op(")")) break;
      tuple->children.push_back(parse_expression());
    }
    expect_op(")");
    return seal(std::move(tuple));
  }

  ExprPtr parse_list() {
    auto list = make(Expr::Kind::kList, cur().pos);
    advance();
    while (!is_op("]")) {
      list->children.push_back(parse_expression());
      if (!skip_op(",")) break;
    }
    expect_op("]");
    return seal(std::move(list));
  }

  ExprPtr parse_dict() {
    auto dict = make(Expr::Kind::kDict, cur().pos);
    advance();
    while (!is_op("}")) {
      dict->children.push_back(parse_expression());
      expect_op(":");
      dict->children.push_back(parse_expression());
      if (!skip_op(",")) break;
    }
    expect_op("}");
    return seal(std::move(dict));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      SourcePos pos = cur().pos;
      if (skip_op(".")) {
        if (cur().kind == TokenKind::kInteger) {
          auto sub = make(Expr::Kind::kSubscript, pos);
          sub->children.push_back(std::move(node));
          sub->children.push_back(parse_primary());
          node = seal(std::move(sub));
          continue;
        }
        auto attr = make(Expr::Kind::kAttribute, pos);
        attr->name = expect_name();
        attr->children.push_back(std::move(node));
        node = seal(std::move(attr));
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    SourcePos pos = cur().pos;
    advance();
    ExprPtr start = is_op(":") ? nullptr : parse_expression();
    if (!is_op(":")) {
      expect_op("]");
      auto sub = make(Expr::Kind::kSubscript, pos);
      sub->children.push_back(std::move(target));
      sub->children.push_back(std::move(start));
      return seal(std::move(sub));
    }
    advance();
    auto slice = make(Expr::Kind::kSlice, pos);
    slice->children.push_back(std::move(target));
    slice->children.push_back(std::move(start));
    slice->children.push_back(is_op(":") || is_op("]") ? nullptr : parse_expression());
    ExprPtr step;
    if (skip_op(":") && !is_op("]")) step = parse_expression();
    slice->children.push_back(std::move(step));
    expect_op("]");
    return seal(std::move(slice));
  }

  // Parses `(args, key=value)` into e->children (after any already there) and e->kwargs.
  void parse_args(Expr* e) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
          peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        e->kwargs.emplace_back(key, parse_expression());
      } else {
        if (!e->kwargs.empty()) fail("positional argument after keyword argument");
        e->children.push_back(parse_expression());
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make(Expr::Kind::kCall, cur().pos);
    call->children.push_back(std::move(callee));
    parse_args(call.get());
    return seal(std::move(call));
  }

  ExprPtr parse_filter_chain(ExprPtr node) {
    do {
      SourcePos pos = cur().pos;
      std::string name = expect_name();
      if (!is_known_filter(name)) throw JinjaError(pos, "unknown filter '" + name + "'");
      auto f = make(Expr::Kind::kFilter, pos);
      f->name = name;
      f->children.push_back(std::move(node));
      if (is_op("(")) parse_args(f.get());
      node = seal(std::move(f));
    } while (skip_op("|"));
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (skip_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    advance();  // 'is'
    auto test = make(Expr::Kind::kTest, cur().pos);
    test->negated = skip_name("not");
    SourcePos name_pos = cur().pos;
    test->name = expect_name();
    if (!is_known_test(test->name)) throw JinjaError(name_pos, "unknown test '" + test->name + "'");
    test->children.push_back(std::move(node));
    if (is_op("(")) {
      parse_args(test.get());
    } else {
      const Token& t = cur();
      bool starts_arg =
          t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
          t.kind == TokenKind::kFloat ||
          (t.kind == TokenKind::kOperator && (t.text == "[" || t.text == "{")) ||
          (t.kind == TokenKind::kName && t.text != "else" && t.text != "or" && t.text != "and" &&
           t.text != "if" && t.text != "in" && t.text != "not" && t.text != "is");
      if (starts_arg) test->children.push_back(parse_postfix(parse_primary()));
    }
    return seal(std::move(test));
  }

  std::vector<Token> tokens_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::unique_ptr<ParsedTemplate> parse_template(const std::string& source,
                                               const LexerOptions& options) {
  return Parser(tokenize(source, options)).run();
}

}  // namespace salvo::jinja
