// Tokens and syntax tree of the Jinja subset. The lexer (jinja_lexer.cc) turns template source into
// tokens with positions and applies whitespace control; the parser (jinja_parser.cc) builds the
// tree; the renderer (jinja_render.cc) walks it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "chat/jinja_value.h"

namespace salvo::jinja {

struct LexerOptions {
  // transformers compiles chat templates with trim_blocks=True and lstrip_blocks=True.
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

enum class TokenKind {
  kText,        // literal template text, whitespace control already applied
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,   // text holds the unescaped value
  kInteger,  // text holds the digits
  kFloat,
  kOperator,  // text holds the operator: + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;
  SourcePos pos;
};

// Throws JinjaError naming line:column for unterminated tags, strings and comments.
std::vector<Token> tokenize(const std::string& source, const LexerOptions& options);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,      // literal
    kName,         // name
    kList,         // children
    kTuple,        // children (evaluated as a list)
    kDict,         // children: key, value, key, value, ...
    kUnary,        // name: "not" | "-" | "+"; children[0]
    kBinary,       // name: operator or "and" / "or" / "in" / "not in"; children[0], children[1]
    kCompare,      // chained comparison: children[0] ops[i] children[i+1]
    kConditional,  // children: then, condition, else (else may be null)
    kAttribute,    // children[0].name
    kSubscript,    // children[0][children[1]]
    kSlice,        // children[0][children[1]:children[2]:children[3]] (missing parts are null)
    kCall,         // children[0](children[1..], kwargs)
    kFilter,       // children[0] | name(children[1..], kwargs)
    kTest,         // children[0] is [not] name(children[1..]); negated
  };
  Kind kind;
  SourcePos pos;
  std::string name;
  Value literal;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
  bool negated = false;          // kTest
  int height = 1;  // of this subtree; bounded so evaluation and destruction stay shallow
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ exprs[0] }}
    kIf,        // exprs[i] guards bodies[i]; an else body is bodies.back() when bodies > exprs
    kFor,       // targets in exprs[0] [if exprs[1]]: bodies[0] [else bodies[1]]
    kSet,       // targets = exprs[0]; or attribute_target.attribute = exprs[0]
    kSetBlock,  // {% set targets[0] %}bodies[0]{% endset %}
    kMacro,     // {% macro name(params) %}bodies[0]{% endmacro %}
    kBreak,
    kContinue,
    kGeneration,   // transformers' {% generation %} marker: renders its body unchanged
    kFilterBlock,  // {% filter exprs[0] %} bodies[0]: exprs[0] is a kFilter over a kLiteral hole
  };
  Kind kind;
  SourcePos pos;
  std::string text;
  std::vector<ExprPtr> exprs;
  std::vector<NodeList> bodies;
  std::vector<std::string> targets;
  std::string attribute_target;  // {% set ns.attr = ... %}: targets[0] is ns
  std::vector<MacroParam> params;
};

struct ParsedTemplate {
  NodeList body;
};

// Throws JinjaError with the position of the first syntax error.
std::unique_ptr<ParsedTemplate> parse_template(const std::string& source,
                                               const LexerOptions& options);

// Filter and test names the renderer knows; the parser rejects others with a position, as Jinja
// does at compile time.
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

}  // namespace salvo::jinja
