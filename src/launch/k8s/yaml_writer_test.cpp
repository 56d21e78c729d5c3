// The manifests' YAML (yaml-cpp's emitter with our plain/quoted choice): layout, the scalars a
// loader would retype, and the characters that must reach a loader as escapes.
#include "launch/k8s/yaml_writer.h"

#include <gtest/gtest.h>

#include "core/testing/test_support.h"

namespace shardtrain::launch::k8s {
namespace {

using Json = nlohmann::ordered_json;

TEST(YamlWriterTest, NestedMapsAndListsKeepKeyOrder) {
  const Json doc = {{"kind", "Pod"},
                    {"spec",
                     {{"containers", Json::array({Json{{"name", "a"}, {"args", {"x", "z"}}},
                                                  Json{{"name", "b"}}})},
                      {"empty", Json::object()},
                      {"none", Json::array()}}}};
  EXPECT_EQ(to_yaml(doc),
            "kind: Pod\n"
            "spec:\n"
            "  containers:\n"
            "    - name: a\n"
            "      args:\n"
            "        - x\n"
            "        - z\n"
            "    - name: b\n"
            "  empty: {}\n"
            "  none: []\n");
}

TEST(YamlWriterTest, ScalarsThatALoaderWouldRetypeAreQuoted) {
  for (const char* text :
       {"yes",     "on",   "Off",  "y",           "N",   "true", "null",  "~",     "8",      "0x1f",
        "1e3",     "1:20", ".inf", "2024-01-01",  "-1",  "+5",   "",      " lead", "trail ", "a: b",
        "a #b",    "end:", "-",    "=",           "@x",  "'",    "\"q\"", "x[0]",  "a,b",    "*ref",
        "&anchor", "!tag", "%dir", "line\nbreak", "{x}", "|",    ">"}) {
    EXPECT_FALSE(plain_scalar_is_safe(text)) << "'" << text << "'";
  }
  for (const char* text : {"Pod", "nvidia.com/gpu", "--config", "/etc/job.toml",
                           "llama-ft-etcd:2379", "http://0.0.0.0:2379", "a=b", "OnFailure"}) {
    EXPECT_TRUE(plain_scalar_is_safe(text)) << text;
  }
  EXPECT_FALSE(plain_scalar_is_safe("64Gi"));  // any leading digit is quoted: "64Gi", "2379"
  EXPECT_EQ(to_yaml(Json{{"port", "9400"}, {"count", 9400}, {"on", true}, {"x", nullptr}}),
            "port: \"9400\"\ncount: 9400\n\"on\": true\nx: null\n");
  EXPECT_EQ(to_yaml(Json{{"s", "a\"b\\c\nd"}}), "s: \"a\\\"b\\\\c\\nd\"\n");
}

TEST(YamlWriterTest, ListOfListsAndStreams) {
  EXPECT_EQ(to_yaml(Json{{"m", Json::array({Json::array({1, 2}), Json::array()})}}),
            "m:\n  -\n    - 1\n    - 2\n  - []\n");
  EXPECT_EQ(to_yaml_stream({Json{{"a", 1}}, Json{{"b", 2}}}), "a: 1\n---\nb: 2\n");
}

TEST(YamlWriterTest, ArgumentsPassThroughWithControlsEscaped) {
  // A flow-looking argument stays one string; NEL, DEL, C1, U+2028 and non-ASCII are escaped
  // (a YAML 1.1 loader reads a raw NEL or U+2028 as a line break, a raw DEL is refused).
  const Json doc = {{"args",
                     {"[1, 2]",
                      "a\xc2\x85"
                      "b",
                      "d\x7f", "\xc2\x9b", "\xe2\x80\xa8", "\xc3\xa9"}}};
  EXPECT_EQ(to_yaml(doc),
            "args:\n"
            "  - \"[1, 2]\"\n"
            "  - \"a\\x85b\"\n"
            "  - \"d\\x7f\"\n"
            "  - \"\\x9b\"\n"
            "  - \"\\u2028\"\n"
            "  - \"\\xe9\"\n");
  EXPECT_EQ(testing::error_of([] {
              to_yaml(Json{{"x", "\xff"}});
            }),
            "the manifest text '\\xff' is not valid UTF-8; pass UTF-8 text");
}

}  // namespace
}  // namespace shardtrain::launch::k8s
