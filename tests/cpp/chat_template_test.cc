// Unit tests of the Jinja subset behind chat templates: language pieces against outputs recorded
// from Python jinja2 3.1 (configured as transformers does), error positions for malformed
// templates, and the resource limits.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "chat/builtin_templates.h"

namespace salvo {
namespace {

struct Case {
  const char* source;
  const char* context;   // JSON object of template variables
  const char* expected;  // jinja2's output
};

// Recorded with jinja2 3.1.6: ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[loopcontrols]) plus transformers' tojson.
const Case kCases[] = {
    {R"({{ 'a' ~ 1 ~ none }})", R"({})", R"(a1None)"},
    {R"({{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 + 1 }})",
     R"({})", R"(7 3 -4 2 3.5 1024 2.5)"},
    {R"({{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 3.0 }} {{ 10 / 5 }})", R"({})",
     R"(0.30000000000000004 1e+20 1e-05 3.0 2.0)"},
    {R"({{ [1, 'a', none, true, {'k': 'v'}] }})", R"({})", R"([1, 'a', None, True, {'k': 'v'}])"},
    {R"({% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }},{% endfor %})",
     R"({"items": ["a", "b", "c"]})", R"(10TrueFalse33,21FalseFalse32,32FalseTrue31,)"},
    {R"({% for x in items if x != 'b' %}{{ x }}{{ loop.index }}{% else %}empty{% endfor %})",
     R"({"items": ["a", "b", "c"]})", R"(a1c2)"},
    {R"({% for x in [] %}{{ x }}{% else %}empty{% endfor %})", R"({})", R"(empty)"},
    {R"({% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %})", R"({"d": {"b": 1, "a": 2}})",
     R"(b=1;a=2;)"},
    {R"({% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %})",
     R"({})", R"(0134)"},
    {R"({% if a %}A{% elif b %}B{% else %}C{% endif %})", R"({"a": false, "b": true})", R"(B)"},
    {R"({% set ns = namespace(count=0, found=false) %}{% for x in [1,2,3] %}{% set ns.count = ns.count + x %}{% endfor %}{{ ns.count }} {{ ns.found }})",
     R"({})", R"(6 False)"},
    {R"({% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }})", R"({})", R"(1)"},
    {R"({{ messages[0].role }} {{ messages[-1]['content'] }} {{ messages[1:] | length }} {{ messages[5] is defined }})",
     R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})",
     R"(system u 1 False)"},
    {R"({{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][::2] }} {{ 'héllo'[1] }} {{ 'héllo' | length }})",
     R"({})", R"(el olleh [1, 3] é 5)"},
    {R"({{ x is defined }} {{ y is none }} {{ 's' is string }} {{ 1 is number }} {{ [1] is iterable }} {{ {} is mapping }} {{ 3 is odd }} {{ 4 is divisibleby 2 }} {{ x is not defined }})",
     R"({"y": null})", R"(False True True True True True True True True)"},
    {R"({{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }})", R"({})",
     R"(True True True True)"},
    {R"({{ '  hi  ' | trim }}|{{ 'Hi' | upper }}|{{ 'Hi' | lower }}|{{ none | default('d') }}|{{ undefined_var | default('d') }}|{{ '' | default('e', true) }})",
     R"({})", R"(hi|HI|hi|None|d|e)"},
    {R"({{ [1,2,3] | first }} {{ [1,2,3] | last }} {{ ['a','b'] | join(', ') }} {{ 'a-b-c' | replace('-', '+') }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }})",
     R"({})", R"(1 3 a, b a+b+c Hello World Hello)"},
    {R"({{ {'a': 1, 'b': [true, none, 'x"y']} | tojson }} {{ 'é' | tojson }} {{ [1, 2] | tojson(indent=2) }})",
     R"({})",
     R"({"a": 1, "b": [true, null, "x\"y"]} "é" [
  1,
  2
])"},
    {R"({{ 'abc'.startswith('a') }} {{ 'abc'.endswith(('x', 'c')) }} {{ '  x '.strip() }}|{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'xxhixx'.strip('x') }} {{ 'a b'.upper() }})",
     R"({})", R"(True True x|['a', 'b', '', 'c'] ['a', 'b'] hi A B)"},
    {R"({{ d.get('a') }} {{ d.get('z', 'no') }} {{ d.keys() | list }} {{ d.values() | list }})",
     R"({"d": {"a": 1, "b": 2}})", R"(1 no ['a', 'b'] [1, 2])"},
    {R"({{ users | selectattr('active') | map(attribute='name') | join(',') }} {{ users | rejectattr('active') | list | length }} {{ [3,1,2] | sort }} {{ [1,2,2,3] | unique | list }} {{ [1,2,3] | sum }} {{ [1,2,3] | reverse | list }})",
     R"({"users": [{"name": "a", "active": true}, {"name": "b", "active": false}]})",
     R"(a 1 [1, 2, 3] [1, 2, 3] 6 [3, 2, 1])"},
    {R"({{ 'yes' if x else 'no' }} {{ 'yes' if not x }}|{{ x and 'A' or 'B' }})", R"({"x": false})",
     R"(no yes|B)"},
    {R"({{ "it's" }} {{ 'tab\there' }} {{ 'uni\u00e9' }} {{ 'a' 'b' }})", R"({})",
     R"(it's tab	here unié ab)"},
    {R"({%- if true -%}
  x  
{%- endif -%}
  y)",
     R"({})", R"(xy)"},
    {R"({% if true %}
    indented
{% endif %}
after
)",
     R"({})",
     R"(    indented
after)"},
    {R"(  {% if true %}kept{% endif %}  
  {{ 'v' }}  
)",
     R"({})",
     R"(kept  
  v  )"},
    {R"({# comment #}a{#- trimmed -#}  b
{# line #}
c)",
     R"({})",
     R"(ab
c)"},
    {R"({% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }})",
     R"({})", R"(Hi Bob! Hi Al?)"},
    {R"({% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}])", R"({})", R"([inner 2])"},
    {R"({{ {'a': {'b': 1}} }} {{ {'a': {'b': 1}}['a']['b'] }})", R"({})", R"({'a': {'b': 1}} 1)"},
    {R"({{ none }} {{ true }} {{ 1 == 1.0 }} {{ [1, 2] == [1, 2] }} {{ 'a' < 'b' }} {{ 1 < 2 < 3 }})",
     R"({})", R"(None True True True True True)"},
    {R"({% raw %}{{ not rendered }}{% endraw %})", R"({})", R"({{ not rendered }})"},
    {R"({{ 'abc' | indent(2) }}|{{ 'a
b

c' | indent(2) }}|{{ 'a
b' | indent(2, true) }})",
     R"({})",
     R"(abc|a
  b

  c|  a
  b)"},
    {R"({{ (1, 2) | list }} {{ x.y is defined }} {{ 'a%sb' | length }})", R"({"x": {}})",
     R"([1, 2] False 4)"},
    {R"({{ [1,'a'] | map('string') | join }} {{ [0,1,2] | select | list }} {{ [1,2,3,4] | select('odd') | list }})",
     R"({"d": {"b": 2, "a": 1}})", R"(1a [1, 2] [1, 3])"},
    {R"({{ ' x　' | trim }}|{{ 'A b' | wordcount }} {{ 3.7 | int }} {{ '42' | int }} {{ 'x' | int }} {{ 2 | float }} {{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }})",
     R"({})", R"(x|2 3 42 0 2.0 3 2.0 3.14)"},
};

Expected<std::string> render_source(const std::string& source,
                                    const nlohmann::ordered_json& context) {
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) return tmpl.status();
  return tmpl->render_json(nlohmann::ordered_json::array(), false, "<s>", "</s>", context);
}

std::string error_of(const std::string& source,
                     const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  auto out = render_source(source, context);
  return out.ok() ? std::string("(no error)") : out.status().message();
}

TEST(ChatTemplateTest, MatchesJinja2) {
  for (const Case& c : kCases) {
    auto out = render_source(c.source, nlohmann::ordered_json::parse(c.context));
    ASSERT_TRUE(out.ok()) << c.source << "\n" << out.status().message();
    EXPECT_EQ(*out, c.expected) << c.source;
  }
}

TEST(ChatTemplateTest, RenderWithChatMessages) {
  auto tmpl = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m['content'] }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}{{ eos_token }}{{ tools is none }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  auto out = tmpl->render({{"system", "S"}, {"user", "U"}}, true, "<s>", "</s>");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, "<s><system>S<user>U<assistant></s>True");
  auto no_gen = tmpl->render({{"user", "U"}}, false, "", "");
  ASSERT_TRUE(no_gen.ok());
  EXPECT_EQ(*no_gen, "<user>UTrue");
}

TEST(ChatTemplateTest, TrailingNewlineOfSourceIsDropped) {
  auto out = render_source("a\n", nlohmann::ordered_json::object());
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "a");
  auto crlf = render_source("a\r\nb\r\n\r\n", nlohmann::ordered_json::object());
  ASSERT_TRUE(crlf.ok());
  EXPECT_EQ(*crlf, "a\nb\n");
}

TEST(ChatTemplateTest, RaiseExceptionBecomesTheError) {
  std::string err = error_of("line one\n  {{ raise_exception('roles must alternate') }}");
  EXPECT_NE(err.find("roles must alternate"), std::string::npos) << err;
  EXPECT_NE(err.find("2:"), std::string::npos) << err;
}

TEST(ChatTemplateTest, SyntaxErrorsNameLineAndColumn) {
  struct ErrorCase {
    const char* source;
    const char* position;
    const char* words;
  };
  const ErrorCase cases[] = {
      {"{% for m in messages %}\n{{ m }}", "1:4", "unclosed 'for'"},
      {"ok\n{% if x %}\nyes", "2:4", "unclosed 'if'"},
      {"{{ x | nosuchfilter }}", "1:8", "unknown filter 'nosuchfilter'"},
      {"{% if x is nosuchtest %}{% endif %}", "1:12", "unknown test"},
      {"a\n  {{ 1 + }}", "2:10", "unexpected"},
      {"{{ x ", "1:1", "missing '}}'"},
      {"{% if x ", "1:1", "missing '%}'"},
      {"{{ 'abc }}", "1:4", "unterminated string"},
      {"{# comment", "1:1", "unterminated comment"},
      {"{% endfor %}", "1:4", "unexpected 'endfor'"},
      {"{% frobnicate %}", "1:4", "unknown tag 'frobnicate'"},
      {"{% include 'x' %}", "1:4", "unsupported tag 'include'"},
      {"{{ (1 }}", "1:8", "unbalanced '}'"},
      {"{{ f(1 2) }}", "1:8", "expected ')'"},
      {"{{ a ] }}", "1:6", "unbalanced"},
      {"{% break %}", "1:4", "outside of a for loop"},
      {"{{ x @ y }}", "1:6", "unexpected character"},
  };
  for (const ErrorCase& c : cases) {
    auto tmpl = ChatTemplate::parse(c.source);
    ASSERT_FALSE(tmpl.ok()) << c.source;
    const std::string& msg = tmpl.status().message();
    EXPECT_NE(msg.find(std::string("chat template ") + c.position + ":"), std::string::npos)
        << c.source << " -> " << msg;
    EXPECT_NE(msg.find(c.words), std::string::npos) << c.source << " -> " << msg;
  }
}

TEST(ChatTemplateTest, RuntimeErrorsNamePosition) {
  EXPECT_NE(error_of("{{ x.y }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("\n{{ 'a' + 1 }}").find("2:8"), std::string::npos)
      << error_of("\n{{ 'a' + 1 }}");
  EXPECT_NE(error_of("{{ 1 // 0 }}").find("division"), std::string::npos);
  EXPECT_NE(error_of("{% for x in 5 %}{% endfor %}").find("not iterable"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a'.nosuch() }}").find("no attribute 'nosuch'"), std::string::npos);
  EXPECT_NE(error_of("{{ [1].append(2) }}").find("cannot modify"), std::string::npos);
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.y = 2 %}").find("non-namespace"), std::string::npos);
  EXPECT_NE(error_of("{{ nosuchfn() }}").find("'nosuchfn' is undefined"), std::string::npos);
}

TEST(ChatTemplateTest, LimitsStopHostileTemplates) {
  // Deep nesting is rejected by the parser instead of overflowing the stack.
  std::string deep(5000, '(');
  EXPECT_NE(error_of("{{ " + deep + "1" + std::string(5000, ')') + " }}").find("too deeply"),
            std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += " + 1";
  EXPECT_NE(error_of(chain + " }}").find("too deeply"), std::string::npos);
  std::string nested_ifs;
  for (int i = 0; i < 3000; ++i) nested_ifs += "{% if true %}";
  EXPECT_NE(error_of(nested_ifs).find("too deeply"), std::string::npos);
  // Output and string growth are bounded.
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("exceeds the limit"), std::string::npos);
  // So is time: 10^10 loop iterations stop at the step limit.
  EXPECT_NE(
      error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
          .find("evaluation limit"),
      std::string::npos);
  // Unbounded recursion through a macro stops at the depth limit.
  EXPECT_NE(
      error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nesting exceeds"),
      std::string::npos);
  EXPECT_NE(error_of("{{ range(1000000000) | length }}").find("range too big"), std::string::npos);
}

TEST(ChatTemplateTest, MalformedInputNeverCrashes) {
  // Every prefix of a real template either parses or fails with a message; none crash.
  std::string source = kGemma3ChatTemplate;
  for (size_t n = 0; n <= source.size(); n += 7) {
    auto tmpl = ChatTemplate::parse(source.substr(0, n));
    if (tmpl.ok()) {
      auto out = tmpl->render({{"user", "hi"}}, true, "<bos>", "<eos>");
      if (!out.ok()) EXPECT_FALSE(out.status().message().empty());
    } else {
      EXPECT_NE(tmpl.status().message().find("chat template"), std::string::npos);
    }
  }
}

TEST(ChatTemplateTest, Gemma3BuiltinMatchesTemplatesDir) {
  std::ifstream in(std::string(SALVO_SOURCE_DIR) + "/templates/gemma3.jinja", std::ios::binary);
  ASSERT_TRUE(in) << "templates/gemma3.jinja not found";
  std::ostringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), std::string(kGemma3ChatTemplate));
}

TEST(ChatTemplateTest, Gemma3Rendering) {
  auto tmpl = ChatTemplate::parse(kGemma3ChatTemplate);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  auto out = tmpl->render(
      {{"system", "Be brief."}, {"user", "  Hi  "}, {"assistant", "Hello."}, {"user", "Bye"}}, true,
      "<bos>", "<eos>");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out,
            "<bos><start_of_turn>user\nBe "
            "brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  auto bad = tmpl->render({{"user", "a"}, {"user", "b"}}, true, "<bos>", "<eos>");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("Conversation roles must alternate"), std::string::npos);
}

}  // namespace
}  // namespace salvo
