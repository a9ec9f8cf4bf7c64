// JSON schema -> grammar: documents the schema accepts match, documents it rejects do not, and
// unsupported keywords are errors that name the keyword.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/json_grammar.h"
#include "grammar/json_schema.h"
#include "grammar_test_util.h"

namespace moeflow {
namespace {

using ojson = nlohmann::ordered_json;
using test::is_prefix;
using test::matches;

std::shared_ptr<const Grammar> schema(const char* text) {
  return json_schema_grammar(ojson::parse(text));
}

TEST(JsonGrammar, AnyObject) {
  auto g = json_object_grammar();
  for (const char* s :
       {"{}", " {\n}", R"({"a":1})", R"({"a": [1, 2.5e-3, "x", null, true, {"b": {}}]})",
        R"({"k\"\\\u00e9\n": "é☃"})", R"({ "a" : -0.5 , "b":[ ] })"})
    EXPECT_TRUE(matches(g, s)) << s;
  for (const char* s :
       {"[]", "1", R"({"a"})", R"({"a":01})", R"({"a":1,})", R"({a:1})", "{\"a\":\"\x01\"}",
        R"({"a":"\x"})", R"({"a":1} )", R"({"a":.5})", R"({"a":"\ud8"})", R"({"a":  1})"})
    EXPECT_FALSE(matches(g, s)) << s;
}

// What the grammar writes, nlohmann (the server's parser of tool-call arguments) reads: no lone
// surrogate escapes, no exponent beyond a double's range.
TEST(JsonGrammar, EveryNumberAndEscapeParses) {
  auto g = json_object_grammar();
  for (const char* s : {R"({"a": "\ud83d\ude00"})", R"({"a": "\uD7FF\uE000"})", R"({"a": 1e99})",
                        R"({"a": -9999999999999999.9999999999999999E+99})"}) {
    EXPECT_TRUE(matches(g, s)) << s;
    EXPECT_FALSE(ojson::parse(s, nullptr, false).is_discarded()) << s;
  }
  for (const char* s : {R"({"a": "\udc9c"})", R"({"a": "\ud83d"})", R"({"a": "\ud83dx"})",
                        R"({"a": "\ud83d\u0041"})", R"({"a": 1e791})"}) {
    EXPECT_FALSE(matches(g, s)) << s;
    EXPECT_TRUE(ojson::parse(s, nullptr, false).is_discarded()) << s;
  }
}

TEST(JsonSchema, ObjectWithRequiredAndOptionalPropertiesInOrder) {
  auto g = schema(R"({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                   "email": {"type": "string"}, "admin": {"type": "boolean"}},
    "required": ["name", "admin"], "additionalProperties": false})");
  for (const char* s : {R"({"name":"a","admin":true})",
                        R"({"name": "a", "age": 3, "email": "x@y", "admin": false})",
                        R"({"name":"a","email":"","admin":false})",
                        R"({ "name" : "a" , "age" : -12 , "admin" : true })"})
    EXPECT_TRUE(matches(g, s)) << s;
  for (const char* s :
       {R"({"admin":true})", R"({"name":"a"})", R"({"admin":true,"name":"a"})",
        R"({"name":"a","admin":true,"x":1})", R"({"name":"a","age":1.5,"admin":true})",
        R"({"name":"a",,"admin":true})", R"({"name":1,"admin":true})", "{}"})
    EXPECT_FALSE(matches(g, s)) << s;
}

TEST(JsonSchema, AllOptionalPropertiesMayAllBeLeftOut) {
  auto g = schema(R"({"properties": {"a": {"type": "null"}, "b": {"const": 7}}})");
  for (const char* s : {"{}", R"({"a":null})", R"({"b":7})", R"({"a":null,"b":7})"})
    EXPECT_TRUE(matches(g, s)) << s;
  for (const char* s : {R"({,"b":7})", R"({"b":7,"a":null})", R"({"b":8})", R"({"a":null,})"})
    EXPECT_FALSE(matches(g, s)) << s;
}

TEST(JsonSchema, NestedObjectsArraysEnumsAndConst) {
  auto g = schema(R"({
    "type": "object",
    "properties": {
      "kind": {"const": "order"},
      "status": {"enum": ["open", "closed", 3, null]},
      "items": {"type": "array", "minItems": 1, "maxItems": 3,
                "items": {"type": "object", "properties": {"sku": {"type": "string"},
                          "qty": {"type": "number"}}, "required": ["sku", "qty"]}},
      "meta": {"type": "object", "additionalProperties": {"type": "integer"}}
    },
    "required": ["kind", "status", "items", "meta"]})");
  EXPECT_TRUE(
      matches(g, R"({"kind":"order","status":"open","items":[{"sku":"a","qty":1}],"meta":{}})"));
  EXPECT_TRUE(matches(g, R"({"kind": "order", "status": null, "items": [{"sku": "a", "qty": 1.5},
    {"sku": "b", "qty": 2e3}, {"sku": "c", "qty": -1}], "meta": {"x": 1, "y": -2}})"));
  EXPECT_FALSE(matches(g, R"({"kind":"order","status":"open","items":[],"meta":{}})"));
  EXPECT_FALSE(matches(g, R"({"kind":"order","status":"open","items":[{"sku":"a","qty":1},
    {"sku":"a","qty":1},{"sku":"a","qty":1},{"sku":"a","qty":1}],"meta":{}})"));
  EXPECT_FALSE(
      matches(g, R"({"kind":"x","status":"open","items":[{"sku":"a","qty":1}],"meta":{}})"));
  EXPECT_FALSE(
      matches(g, R"({"kind":"order","status":"shut","items":[{"sku":"a","qty":1}],"meta":{}})"));
  EXPECT_FALSE(matches(g, R"({"kind":"order","status":3,"items":[{"sku":"a"}],"meta":{}})"));
  EXPECT_FALSE(
      matches(g, R"({"kind":"order","status":3,"items":[{"sku":"a","qty":1}],"meta":{"x":"y"}})"));
}

TEST(JsonSchema, TypesAnyOfRefsAndStringLengths) {
  auto g = schema(R"({
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": ["integer", "null"]},
              "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
              "required": ["v", "kids"]}},
    "anyOf": [{"$ref": "#/$defs/node"}, {"type": "string", "minLength": 2, "maxLength": 3}]})");
  EXPECT_TRUE(
      matches(g, R"({"v":1,"kids":[{"v":null,"kids":[]},{"v":2,"kids":[{"v":3,"kids":[]}]}]})"));
  EXPECT_TRUE(matches(g, R"("ab")"));
  EXPECT_TRUE(matches(g, R"("é\n☃")"));  // three characters, one an escape
  EXPECT_FALSE(matches(g, R"("a")"));
  EXPECT_FALSE(matches(g, R"("abcd")"));
  EXPECT_FALSE(matches(g, R"({"v":"1","kids":[]})"));
  EXPECT_TRUE(matches(schema("true"), "[1]"));
  EXPECT_TRUE(matches(schema(R"({"type": "number"})"), "-0.5E+10"));
  EXPECT_FALSE(matches(schema(R"({"type": "integer"})"), "1.0"));
  EXPECT_TRUE(matches(schema(R"({"description": "anything"})"), R"({"a":[]})"));
}

TEST(JsonSchema, OutputIsDoneWhenTheRootValueCloses) {
  GrammarMatcher m(schema(R"({"type":"object","properties":{"a":{"type":"boolean"}}})"));
  const auto s = m.walk(m.start(), R"({"a":true})");
  ASSERT_NE(s, GrammarMatcher::kDead);
  EXPECT_TRUE(m.accepting(s));
  EXPECT_FALSE(m.can_continue(s));
}

TEST(JsonSchema, GrammarSizeIsBounded) {
  // 300 properties, each a string of up to 10000 characters: 3M rules, refused.
  ojson s = {{"type", "object"}, {"properties", ojson::object()}};
  for (int i = 0; i < 300; ++i)
    s["properties"]["p" + std::to_string(i)] = {{"type", "string"}, {"maxLength", 10000}};
  try {
    json_schema_grammar(s);
    ADD_FAILURE() << "no error";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("symbols"), std::string::npos) << e.what();
  }
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  struct Case {
    const char* schema;
    const char* keyword;
    const char* path;
  };
  const Case cases[] = {
      {R"({"type": "string", "pattern": "^a"})", "pattern", ""},
      {R"({"properties": {"d": {"type": "string", "format": "date"}}})", "format", "/properties/d"},
      {R"({"type": "integer", "minimum": 0})", "minimum", ""},
      {R"({"type": "array", "items": [{"type": "string"}]})", "items", ""},
      {R"({"type": "array", "items": {"uniqueItems": true}})", "uniqueItems", "/items"},
      {R"({"type": "object", "patternProperties": {}})", "patternProperties", ""},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "allOf", ""},
      {R"({"anyOf": [{"type": "string"}], "type": "string"})", "anyOf", ""},
      {R"({"$ref": "other.json#/a"})", "$ref", ""},
      {R"({"$ref": "#/$defs/none"})", "$ref", ""},
      {R"({"type": "text"})", "type", ""},
      {R"({"enum": []})", "enum", ""},
      {R"({"type": "array", "minItems": 3, "maxItems": 2})", "maxItems", ""},
      {R"({"$ref": "#"})", "$ref", ""},
  };
  for (const Case& c : cases) {
    try {
      schema(c.schema);
      ADD_FAILURE() << "no error for " << c.schema;
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword, c.keyword) << c.schema << ": " << e.what();
      EXPECT_EQ(e.path, c.path) << c.schema;
      EXPECT_NE(std::string(e.what()).find(c.keyword), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace moeflow
