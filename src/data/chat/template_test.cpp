// Chat template engine tests. Every construct in tests/chat_template/constructs.jsonl (written
// by tools/tokenizer/make_construct_goldens.py with Jinja2 configured as transformers configures
// it) must render byte-identically, and every case Jinja2 refuses must be an Error here. Then
// hand-written checks: error positions, generation spans, limits against hostile templates.
#include "data/chat/template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace shardtrain::chat {
namespace {

ValueDict vars_of(const nlohmann::ordered_json& json) {
  ValueDict vars;
  for (const auto& [key, value] : json.items()) vars.set(key, Value::from_json(value));
  return vars;
}

std::string render(const std::string& source, const nlohmann::ordered_json& vars = {},
                   const RenderLimits& limits = {}) {
  return Template(source)
      .render(vars_of(vars.is_null() ? nlohmann::ordered_json::object() : vars), limits)
      .text;
}

std::string error_of(const std::string& source, const RenderLimits& limits = {}) {
  try {
    render(source, {}, limits);
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(ChatTemplate, ConstructsMatchJinja2) {
  std::ifstream in(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/chat_template/constructs.jsonl");
  ASSERT_TRUE(in) << "tests/chat_template/constructs.jsonl is missing";
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    const auto record = nlohmann::ordered_json::parse(line);
    const std::string name = record["name"];
    const std::string source = record["template"];
    ++cases;
    if (record.contains("error")) {
      EXPECT_THROW(render(source, record["vars"]), Error) << name;
      continue;
    }
    try {
      EXPECT_EQ(render(source, record["vars"]), record["expected"].get<std::string>()) << name;
    } catch (const Error& error) {
      ADD_FAILURE() << name << ": " << error.what();
    }
  }
  EXPECT_GE(cases, 100);
}

TEST(ChatTemplate, ErrorsCarryLineAndColumn) {
  EXPECT_EQ(error_of("ab\n  {{ raise_exception('no system role') }}"),
            "line 2, column 6: the template raised an exception: no system role");
  EXPECT_EQ(error_of("{% if true %}\n{{ nothing.attr }}{% endif %}"),
            "line 2, column 11: 'nothing' is undefined");
  EXPECT_EQ(error_of("x\n{% include 'a' %}"),
            "line 2, column 4: \"{% include %}\" is not supported in chat templates");
  EXPECT_EQ(error_of("{{ 'abc }}"), "line 1, column 4: unterminated string literal");
  EXPECT_EQ(error_of("{% for x in y %}"),
            "line 1, column 17: unexpected end of template; expected \"else\"");
}

TEST(ChatTemplate, GenerationSpansCoverTheirOutput) {
  const Template t(
      "A{% generation %}BC{% endgeneration %}D{% for x in [1, 2] %}"
      "{% generation %}<{{ x }}>{% endgeneration %}{% endfor %}");
  const RenderOutput out = t.render({});
  EXPECT_EQ(out.text, "ABCD<1><2>");
  ASSERT_EQ(out.generation_spans.size(), 3u);
  EXPECT_EQ(out.generation_spans[0], (std::pair<size_t, size_t>{1, 3}));
  EXPECT_EQ(out.generation_spans[1], (std::pair<size_t, size_t>{4, 7}));
  EXPECT_EQ(out.generation_spans[2], (std::pair<size_t, size_t>{7, 10}));
}

TEST(ChatTemplate, HostileTemplatesHitLimits) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 100000;
  EXPECT_NE(error_of("{{ 'a' * 100000000 }}", limits).find("over the limit"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                     limits)
                .find("over the limit"),
            std::string::npos);
  EXPECT_NE(error_of("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                     limits)
                .find("steps"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(10000000000) }}", limits).find("over the limit"), std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", limits).find("nested"),
            std::string::npos);
  EXPECT_NE(
      error_of("{{ 'x' | replace('x', 'x' * 60000) | replace('x', 'yyyyyyyyyyyyy') }}", limits)
          .find("over the limit"),
      std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 2 ** 64 }}").find("overflow"), std::string::npos);
}

TEST(ChatTemplate, PythonFloatRepr) {
  EXPECT_EQ(python_float_repr(1.0), "1.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(123456789012345.6), "123456789012345.6");
  EXPECT_EQ(python_float_repr(1e-5), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(-2.5e-10), "-2.5e-10");
}

}  // namespace
}  // namespace shardtrain::chat
