#include "server/response_format.h"

#include <fmt/format.h>

#include "grammar/json_grammar.h"
#include "grammar/json_schema.h"
#include "server/request_parse.h"

namespace moeflow {

namespace {

RequestError bad_format(std::string msg) {
  return RequestError(400, std::move(msg), "response_format");
}

std::string shown_value(const nlohmann::ordered_json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

}  // namespace

std::shared_ptr<const Grammar> parse_response_format(const nlohmann::ordered_json& rf) {
  auto type = rf.is_object() ? rf.find("type") : rf.end();
  if (!rf.is_object() || type == rf.end() || !type->is_string())
    throw bad_format("'response_format' must be an object with a string 'type'");
  const std::string t = type->get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") {
    static const std::shared_ptr<const Grammar> any_object = json_object_grammar();
    return any_object;
  }
  if (t != "json_schema")
    throw bad_format(fmt::format(
        "'response_format' type must be \"text\", \"json_object\" or \"json_schema\", got {}",
        shown_value(*type)));
  auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    throw bad_format("'response_format' of type json_schema needs a 'json_schema' object");
  if (auto n = js->find("name"); n != js->end() && !n->is_string())
    throw bad_format("'response_format.json_schema.name' must be a string");
  if (auto s = js->find("strict"); s != js->end() && !s->is_boolean() && !s->is_null())
    throw bad_format("'response_format.json_schema.strict' must be true or false");
  auto schema = js->find("schema");
  if (schema == js->end() || !(schema->is_object() || schema->is_boolean()))
    throw bad_format("'response_format.json_schema.schema' must be a JSON schema (an object)");
  try {
    return json_schema_grammar(*schema);
  } catch (const SchemaError& e) {
    throw bad_format(fmt::format("'response_format.json_schema.schema': {}", e.what()));
  }
}

}  // namespace moeflow
