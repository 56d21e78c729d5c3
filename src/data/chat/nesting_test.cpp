// Hostile chat templates and data against the engine's bounds: every case below crashed (stack
// overflow), threw an uncaught std:: exception, or allocated gigabytes before the bounds
// existed. Each must now end in one shardtrain::Error naming the limit, or render correctly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "data/chat/parser.h"
#include "data/chat/template.h"

namespace shardtrain::chat {
namespace {

std::string render(const std::string& source, const ValueDict& vars = {}) {
  return Template(source).render(vars).text;
}

std::string error_of(const std::string& source, const ValueDict& vars = {}) {
  try {
    render(source, vars);
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

std::string repeated(const std::string& part, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += part;
  return out;
}

TEST(ChatNesting, LongFilterChainIsRefusedAtTheLimit) {
  EXPECT_EQ(render("{{ ' a '" + repeated("|trim", kMaxExprHeight - 2) + " }}"), "a");
  const std::string error = error_of("{{ x" + repeated("|trim", 100'000) + " }}");
  EXPECT_NE(error.find("expression nested deeper than 400 levels"), std::string::npos) << error;
}

TEST(ChatNesting, LongOperatorChainsAreRefused) {
  EXPECT_EQ(render("{{ 1" + repeated(" + 1", 300) + " }}"), "301");
  // (A comparison chain `1 == 1 == 1` is one flat node, as in Python: no limit needed.)
  for (const std::string op : {" + 1", " ~ 'a'", " * 1", " or x", " and x", "|trim"}) {
    const std::string error = error_of("{{ 1" + repeated(op, 20'000) + " }}");
    EXPECT_NE(error.find("nested deeper than"), std::string::npos) << op << ": " << error;
  }
  const std::string calls = error_of("{{ f" + repeated("()", 20'000) + " }}");
  EXPECT_NE(calls.find("nested deeper than"), std::string::npos) << calls;
  const std::string items = error_of("{{ x" + repeated("[0]", 20'000) + " }}");
  EXPECT_NE(items.find("nested deeper than"), std::string::npos) << items;
}

TEST(ChatNesting, ValuesBuiltDeeplyInALoopAreRefused) {
  // Each iteration wraps the list once more; printing or freeing 100,000 levels would recurse.
  const std::string error = error_of(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}"
      "{% endfor %}{{ ns.x }}");
  // A namespace holds values at most 99 levels deep (it counts as 100 itself).
  EXPECT_NE(error.find("nested deeper than 99 levels"), std::string::npos) << error;
  EXPECT_EQ(render("{% set ns = namespace(x=[]) %}{% for i in range(3) %}{% set ns.x = [ns.x] %}"
                   "{% endfor %}{{ ns.x }}"),
            "[[[[]]]]");
}

TEST(ChatNesting, ANamespaceCannotHoldItself) {
  const std::string error = error_of("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}");
  EXPECT_NE(error.find("cannot assign a namespace"), std::string::npos) << error;
  const std::string via_list =
      error_of("{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}{{ ns }}");
  EXPECT_NE(via_list.find("cannot assign a namespace"), std::string::npos) << via_list;
}

TEST(ChatNesting, DeepJsonIsRefusedBeforeConverting) {
  nlohmann::ordered_json deep = nlohmann::ordered_json::array();
  for (int i = 0; i < 100'000; ++i) deep = nlohmann::ordered_json::array({std::move(deep)});
  try {
    Value::from_json(deep);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("JSON nested deeper than 200 levels"),
              std::string::npos)
        << error.what();
  }
  nlohmann::ordered_json shallow = {{"a", {{"b", {1, 2}}}}};
  EXPECT_EQ(Value::from_json(shallow).depth(), 3);
}

TEST(ChatNesting, DeepMacroRecursionIsBoundedInTotal) {
  // A macro calling itself at the bottom of a 300-high expression, 99 times (under the call
  // limit): ~30,000 nested evaluations; the total is bounded instead of the stack.
  const std::string error =
      error_of("{% macro m(n) %}{% if n > 0 %}{{ m(n - 1)" + repeated(" ~ 'x'", 300) +
               " }}{% endif %}{% endmacro %}{{ m(99) }}");
  EXPECT_NE(error.find("nested deeper than"), std::string::npos) << error;
}

TEST(ChatNesting, HugeIndicesAreOneLineErrors) {
  ValueDict vars;
  vars.set("items", Value::list({Value::integer(7)}));
  const std::string attribute = error_of("{{ items.99999999999999999999999 }}", vars);
  EXPECT_NE(attribute.find("too large"), std::string::npos) << attribute;
  const std::string path =
      error_of("{{ [items] | map(attribute='0.99999999999999999999999') | list }}", vars);
  EXPECT_NE(path.find("index 99999999999999999999999 is out of range"), std::string::npos) << path;
  const std::string format = error_of("{{ '{99999999999999999999999}'.format(1) }}");
  EXPECT_NE(format.find("str.format: index 99999999999999999999999 is out of range"),
            std::string::npos)
      << format;
  EXPECT_EQ(render("{{ '{0}-{1}'.format('a', 'b') }}"), "a-b");
}

TEST(ChatNesting, SizesAreCheckedBeforeAllocating) {
  const std::string indent = error_of("{{ 'a\nb' | indent(1000000000000) }}");
  EXPECT_NE(indent.find("over the limit"), std::string::npos) << indent;
  EXPECT_EQ(render("{{ 'a\nb' | indent(2) }}"), "a\n  b");
  // Strings are shared, not copied: 10,000 copies of a 1 MB string are one string (this
  // allocated 10 GB before).
  EXPECT_EQ(render("{% set s = 'x' * 1000000 %}{% set l = [s] * 10000 %}{{ l | length }}"),
            "10000");
  EXPECT_EQ(render("{% set ns = namespace(l=['x' * 1000000]) %}{% for i in range(14) %}"
                   "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}"),
            "16384");
}

}  // namespace
}  // namespace shardtrain::chat
