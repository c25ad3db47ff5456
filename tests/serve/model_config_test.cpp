#include "strato/serve/repository/model_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace strato::serve {
namespace {

constexpr const char* kTritonConfig = R"(
# A config as Triton's docs write them.
name: "resnet"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  {
    name: "INPUT__0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
  }
]
output [ { name: "OUTPUT__0", data_type: TYPE_FP32, dims: [ 1000 ] label_filename: "labels.txt" } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  default_queue_policy { max_queue_size: 16 default_timeout_microseconds: 5000 }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
version_policy: { latest: { num_versions: 2 } }
parameters: { key: "INFERENCE_MODE" value: { string_value: "true" } }
optimization { execution_accelerators { cpu_execution_accelerator: [ { name: "openvino" } ] } }
)";

TEST(ModelConfig, ParsesTritonPbtxt) {
    auto c = parse_model_config_pbtxt(kTritonConfig, "config.pbtxt");
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->name, "resnet");
    EXPECT_EQ(c->platform, "pytorch_libtorch");
    EXPECT_EQ(c->max_batch_size, 8);
    ASSERT_EQ(c->inputs.size(), 1u);
    EXPECT_EQ(c->inputs[0].dims, (std::vector<int64_t>{3, 224, 224}));
    EXPECT_EQ(c->inputs[0].dtype, DataType::kFp32);
    EXPECT_EQ(c->outputs[0].label_filename, "labels.txt");
    ASSERT_TRUE(c->dynamic_batching.has_value());
    EXPECT_EQ(c->dynamic_batching->preferred_batch_size, (std::vector<int64_t>{4, 8}));
    EXPECT_EQ(c->dynamic_batching->max_queue_delay_us, 100);
    EXPECT_EQ(c->dynamic_batching->max_queue_size, 16);
    EXPECT_EQ(c->dynamic_batching->default_timeout_us, 5000);
    EXPECT_EQ(c->instance_count(), 2);
    EXPECT_EQ(c->version_policy.num_versions, 2);
    EXPECT_EQ(c->parameters.at("INFERENCE_MODE"), "true");
    EXPECT_TRUE(validate_model_config(*c, "config.pbtxt").is_ok());
    EXPECT_EQ(c->full_shape(c->inputs[0]), (std::vector<int64_t>{-1, 3, 224, 224}));
}

// A config can come from a client (the load API's "config" parameter): its label file must stay
// inside the model's directory, or classification outputs would read any file the server can.
TEST(ModelConfig, LabelFilesOutsideTheModelDirectoryAreRefused) {
    auto c = parse_model_config_pbtxt(kTritonConfig, "config.pbtxt");
    ASSERT_TRUE(c.is_ok());
    for (const char* ok : {"labels.txt", "meta/labels.txt", "a..b.txt", "./labels.txt"}) {
        c->outputs[0].label_filename = ok;
        EXPECT_TRUE(validate_model_config(*c, "c").is_ok()) << ok;
    }
    for (const char* bad : {"/etc/passwd", "../secret.txt", "meta/../../token", ".."}) {
        c->outputs[0].label_filename = bad;
        EXPECT_EQ(validate_model_config(*c, "c").message(),
                  fmt::format("c: output 'OUTPUT__0': label_filename '{}' must name a file inside the model's directory", bad));
    }
}

TEST(ModelConfig, ModelFilesOutsideTheVersionDirectoryAndNestedArraysAreRefused) {
    for (const char* bad : {"/etc/passwd", "../../model.pt", "a/../../b.onnx"}) {
        auto c = parse_model_config_json(nlohmann::json{{"default_model_filename", bad}}, "load");
        ASSERT_FALSE(c.is_ok()) << bad;
        EXPECT_NE(c.status().message().find("must name a file inside the version directory"), std::string::npos)
            << c.status().message();
    }
    EXPECT_TRUE(parse_model_config_json(nlohmann::json{{"default_model_filename", "sub/model.pt"}}, "load").is_ok());
    // [[8]] was read as 8; a million levels recursed the stack away
    auto nested = parse_model_config_json(nlohmann::json::parse(R"({"max_batch_size": [[8]]})"), "load");
    ASSERT_FALSE(nested.is_ok());
    EXPECT_NE(nested.status().message().find("'max_batch_size' holds an array inside an array"), std::string::npos)
        << nested.status().message();
    EXPECT_FALSE(parse_model_config_toml("max_batch_size = [[8]]\n", "config.toml").is_ok());
    std::string deep = "{}";
    for (int i = 0; i < 40; ++i) deep = R"({"parameters": )" + deep + "}";
    auto too_deep = parse_model_config_json(nlohmann::json::parse(deep), "load");
    ASSERT_FALSE(too_deep.is_ok());
    EXPECT_NE(too_deep.status().message().find("nest deeper than 32"), std::string::npos) << too_deep.status().message();
    // past INT64_MAX is out of range, not wrapped to -1
    auto big = parse_model_config_json(nlohmann::json::parse(R"({"max_batch_size": 18446744073709551615})"), "load");
    EXPECT_FALSE(big.is_ok());
}

TEST(ModelConfig, TomlAndJsonFormsGiveTheSameConfig) {
    auto p = parse_model_config_pbtxt(kTritonConfig, "config.pbtxt");
    ASSERT_TRUE(p.is_ok());
    auto j = parse_model_config_json(model_config_to_json(*p), "json");
    ASSERT_TRUE(j.is_ok()) << j.status().message();
    EXPECT_EQ(j->inputs[0].dims, p->inputs[0].dims);
    EXPECT_EQ(j->dynamic_batching->max_queue_size, 16);
    EXPECT_EQ(j->version_policy.num_versions, 2);
    EXPECT_EQ(j->parameters, p->parameters);
    auto t = parse_model_config_toml(R"(
name = "resnet"
backend = "pytorch"
max_batch_size = 8
[[input]]
name = "INPUT__0"
data_type = "TYPE_FP32"
dims = [3, 224, 224]
[[output]]
name = "OUTPUT__0"
data_type = "TYPE_FP32"
dims = [1000]
[dynamic_batching]
max_queue_delay_microseconds = 100
[parameters]
INFERENCE_MODE = "true"
)",
                                     "config.toml");
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    EXPECT_EQ(t->inputs[0].dims, p->inputs[0].dims);
    EXPECT_EQ(t->dynamic_batching->max_queue_delay_us, 100);
    EXPECT_EQ(t->parameters.at("INFERENCE_MODE"), "true");
}

TEST(ModelConfig, ErrorsNameFileLineAndField) {
    auto e = parse_model_config_pbtxt("name: \"m\"\nmax_batch_size: eight\n", "m/config.pbtxt");
    ASSERT_FALSE(e.is_ok());
    EXPECT_EQ(e.status().message(), "m/config.pbtxt:2: 'max_batch_size' must be an integer, got 'eight'");
    auto u = parse_model_config_pbtxt("name: \"m\"\nmax_batch_sise: 8\n", "c");
    ASSERT_FALSE(u.is_ok());
    EXPECT_NE(u.status().message().find("c:2: unknown field 'max_batch_sise'"), std::string::npos) << u.status().message();
    auto t = parse_model_config_pbtxt("input [ { name: \"x\" data_type: TYPE_FLOAT dims: [1] } ]", "c");
    ASSERT_FALSE(t.is_ok());
    EXPECT_NE(t.status().message().find("unknown data_type 'TYPE_FLOAT'"), std::string::npos);
    auto open = parse_model_config_pbtxt("input [ { name: \"x\" ", "c");
    ASSERT_FALSE(open.is_ok());
    EXPECT_NE(open.status().message().find("unexpected end of file"), std::string::npos);
    auto seq = parse_model_config_pbtxt("sequence_batching { }", "c");
    EXPECT_EQ(seq.status().code(), StatusCode::kUnimplemented);
    auto kind = parse_model_config_pbtxt("instance_group [ { kind: KIND_TPU } ]", "c");
    EXPECT_NE(kind.status().message().find("c:1: unknown instance_group kind 'KIND_TPU' (expected KIND_CPU, KIND_GPU"),
              std::string::npos) << kind.status().message();
    auto gpu = parse_model_config_pbtxt("instance_group [ { kind: KIND_GPU gpus: [ -1 ] } ]", "c");
    EXPECT_NE(gpu.status().message().find("gpus must be CUDA device numbers"), std::string::npos) << gpu.status().message();
}

TEST(ModelConfig, GpuInstanceGroupsInAllThreeForms) {
    auto p = parse_model_config_pbtxt("instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 1 ] }, { kind: KIND_CPU } ]", "c");
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    ASSERT_EQ(p->instance_group.size(), 2u);
    EXPECT_EQ(p->instance_group[0].kind, "KIND_GPU");
    EXPECT_EQ(p->instance_group[0].gpus, (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(p->instance_count(), 5);  // two on each of two GPUs, one on the CPU
    auto j = parse_model_config_json(model_config_to_json(*p), "json");
    ASSERT_TRUE(j.is_ok()) << j.status().message();
    EXPECT_EQ(j->instance_group[0].gpus, p->instance_group[0].gpus);
    auto t = parse_model_config_toml("[[instance_group]]\nkind = \"KIND_GPU\"\ncount = 2\ngpus = [0, 1]\n", "config.toml");
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    EXPECT_EQ(t->instance_group[0].gpus, p->instance_group[0].gpus);
    EXPECT_EQ(t->instance_count(), 4);
}

// model_warmup in Triton's pbtxt form (inputs as key/value map entries), in the JSON /config
// prints (and the load API takes), and in TOML: the same samples; validation names the sample.
TEST(ModelConfig, ModelWarmupInAllThreeFormsAndItsErrors) {
    const std::string io = R"(max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1, 28, 28 ] }, { name: "k" data_type: TYPE_INT64 dims: [ 1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 10 ] } ]
)";
    auto p = parse_model_config_pbtxt(io + R"(model_warmup [
  { name: "b8" batch_size: 8 count: 3
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] random_data: true } }
    inputs { key: "k" value: { data_type: TYPE_INT64 dims: [ 1 ] input_data_file: "k.raw" } } }
])", "c");
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    ASSERT_TRUE(validate_model_config(*p, "c").is_ok()) << validate_model_config(*p, "c").message();
    ASSERT_EQ(p->model_warmup.size(), 1u);
    const WarmupSample& w = p->model_warmup[0];
    EXPECT_EQ(w.name, "b8");
    EXPECT_EQ(w.batch_size, 8);
    EXPECT_EQ(w.count, 3);
    ASSERT_EQ(w.inputs.size(), 2u);
    EXPECT_EQ(w.inputs.at("x").fill, WarmupInput::Fill::kRandom);
    EXPECT_EQ(w.inputs.at("x").dims, (std::vector<int64_t>{1, 28, 28}));
    EXPECT_EQ(w.inputs.at("k").fill, WarmupInput::Fill::kFile);
    EXPECT_EQ(w.inputs.at("k").input_data_file, "k.raw");
    EXPECT_EQ(w.inputs.at("k").dtype, DataType::kInt64);
    const auto printed = model_config_to_json(*p);
    EXPECT_EQ(printed["model_warmup"][0]["inputs"]["x"]["random_data"], true) << printed.dump();
    auto j = parse_model_config_json(printed, "json");
    ASSERT_TRUE(j.is_ok()) << j.status().message();
    ASSERT_EQ(j->model_warmup.size(), 1u);
    EXPECT_EQ(model_config_to_json(*j)["model_warmup"], printed["model_warmup"]);
    auto t = parse_model_config_toml(R"(
[[model_warmup]]
name = "b8"
batch_size = 8
count = 3
[model_warmup.inputs.x]
data_type = "TYPE_FP32"
dims = [1, 28, 28]
random_data = true
[model_warmup.inputs.k]
data_type = "TYPE_INT64"
dims = [1]
input_data_file = "k.raw"
)", "config.toml");
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    EXPECT_EQ(model_config_to_json(*t)["model_warmup"], printed["model_warmup"]);

    // One model_warmup entry (its fields); the parse or validation error must contain `needle`.
    auto expect_error = [&](const std::string& fields, const std::string& needle) {
        const std::string sample = "{ " + fields + " }";
        auto c = parse_model_config_pbtxt(io + "model_warmup [ " + sample + " ]", "c");
        const std::string message = c ? validate_model_config(*c, "c").message() : c.status().message();
        EXPECT_NE(message.find(needle), std::string::npos) << sample << "\n-> " << message;
    };
    const std::string x = R"(inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 1, 28, 28 ] zero_data: true } })";
    const std::string k = R"(inputs { key: "k" value: { data_type: TYPE_INT64 dims: [ 1 ] zero_data: true } })";
    // Sample "a" of batch 1: input x with the fields `value` holds, and k as it should be.
    auto with_x = [&](const std::string& value) {
        return R"(name: "a" batch_size: 1 inputs { key: "x" value: { )" + value + " } } " + k;
    };
    expect_error("name: \"a\" batch_size: 9 " + x + k, "model_warmup 'a': batch_size 9 must be between 1 and max_batch_size 8");
    expect_error("name: \"a\" batch_size: 1 " + x, "model_warmup 'a': no data for input 'k'");
    expect_error("name: \"a\" batch_size: 1 " + x + k + R"( inputs { key: "z" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } })",
                 "the model has no input 'z'");
    expect_error(with_x("data_type: TYPE_FP32 dims: [ 28, 28 ] zero_data: true"), "input 'x' dims [28,28] do not match the input's [1,28,28]");
    expect_error(with_x("data_type: TYPE_INT32 dims: [ 1, 28, 28 ] zero_data: true"), "input 'x' is TYPE_FP32, not TYPE_INT32");
    expect_error(with_x("data_type: TYPE_FP32 dims: [ 1, 28, 28 ] zero_data: true random_data: true"), "exactly one of zero_data");
    expect_error(with_x("data_type: TYPE_FP32 dims: [ 1, 28, 28 ]"), "exactly one of zero_data");
    expect_error(with_x(R"(data_type: TYPE_FP32 dims: [ 1, 28, 28 ] input_data_file: "../../etc/passwd")"),
                 "must name a file inside the model's warmup/ directory");
    expect_error("name: \"a\" batch_size: 1 shape: 3 " + x + k, "unknown field 'shape' in model_warmup");
    expect_error("batch_size: 1 " + x + k, "needs a name");
}

TEST(ModelConfig, ValidationCatchesInconsistentConfigs) {
    ModelConfig c;
    c.name = "m";
    c.inputs.push_back({"x", DataType::kFp32, {4}, false, ""});
    c.outputs.push_back({"y", DataType::kFp32, {2}, false, ""});
    EXPECT_TRUE(validate_model_config(c, "c").is_ok());
    // As Triton: a model without a batch dimension may have a dynamic batcher (its queue policy
    // applies; requests run one at a time), but no preferred batch size.
    c.dynamic_batching = DynamicBatching{};
    EXPECT_TRUE(validate_model_config(c, "c").is_ok());
    c.dynamic_batching->preferred_batch_size = {1};
    EXPECT_NE(validate_model_config(c, "c").message().find("preferred_batch_size 1 must be between 1 and max_batch_size 0"),
              std::string::npos);
    c.max_batch_size = 4;
    c.dynamic_batching->preferred_batch_size = {8};
    EXPECT_NE(validate_model_config(c, "c").message().find("preferred_batch_size 8"), std::string::npos);
    c.dynamic_batching->preferred_batch_size = {};
    c.inputs[0].dims = {};
    EXPECT_NE(validate_model_config(c, "c").message().find("needs dims"), std::string::npos);
    c.inputs[0].dims = {0};
    EXPECT_FALSE(validate_model_config(c, "c").is_ok());
}

// Found by review: protobuf's text format was read loosely. A field given twice kept the last value
// (Triton refuses it), 010 read as ten (protobuf: eight), escapes lost their backslash, enum numbers
// and t/f were refused, and a parameter or warm-up input named "key" or "value" in JSON was taken for
// the text format's map entry (the server's own /config could not be loaded back).
TEST(ModelConfig, ReadsTheTextFormatAsProtobufDoes) {
    auto parse = [](const std::string& text) { return parse_model_config_pbtxt(text, "config.pbtxt"); };
    auto error_of = [&](const std::string& text) {
        auto c = parse(text);
        return c.is_ok() ? std::string("(accepted)") : c.status().message();
    };
    const std::string io = R"( input [ { name: "x" data_type: 11 dims: [ 0x4 ] optional: f } ]
        output [ { name: "y" data_type: TYPE_FP32 dims: [ 02 ] } ] )";
    auto c = parse(R"(name: "m\x31\062\u00e9" max_batch_size: 010 instance_group [ { kind: 2 } ])" + io);
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    EXPECT_EQ(c->name, "m12\xc3\xa9");
    EXPECT_EQ(c->max_batch_size, 8);
    EXPECT_EQ(c->inputs[0].dtype, DataType::kFp32);
    EXPECT_EQ(c->inputs[0].dims, (std::vector<int64_t>{4}));
    EXPECT_FALSE(c->inputs[0].optional);
    EXPECT_EQ(c->outputs[0].dims, (std::vector<int64_t>{2}));
    EXPECT_EQ(c->instance_group[0].kind, "KIND_CPU");
    EXPECT_EQ(parse("max_batch_size: -0x10" + io)->max_batch_size, -16);

    EXPECT_NE(error_of("max_batch_size: 8 max_batch_size: 16" + io).find("config.pbtxt:1: 'max_batch_size' is given twice"),
              std::string::npos);
    EXPECT_NE(error_of("dynamic_batching { max_queue_delay_microseconds: 5 } dynamic_batching { }" + io).find(
                  "'dynamic_batching' is given twice"), std::string::npos);
    EXPECT_NE(error_of("version_policy { latest { } } version_policy { all { } }" + io).find("'version_policy' is given twice"),
              std::string::npos);
    EXPECT_NE(error_of(R"(input [ { name: "x" name: "z" data_type: TYPE_FP32 dims: [ 1 ] } ])").find("'name' is given twice in input"),
              std::string::npos);
    EXPECT_NE(error_of(R"(name: "a\q")").find("unknown escape '\\q'"), std::string::npos);
    // Adjacent literals join whatever their quotes; booleans that ask for an unsupported feature
    // refuse the config in every spelling (a `1` used to load as if the field were off).
    EXPECT_EQ(parse(R"(name: 'm' "1" 'x')" + io)->name, "m1x");
    for (const char* on : {"true", "1", "t", "True"})
        for (const char* field : {"allow_ragged_batch", "is_shape_tensor"}) {
            auto r = parse(fmt::format(R"(input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 1 ] {}: {} }} ])", field, on));
            EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented) << field << ": " << on;
        }
    EXPECT_TRUE(parse(R"(input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] allow_ragged_batch: f is_shape_tensor: 0 } ])").is_ok());
    auto empty_policy = parse("version_policy: { }" + io);
    ASSERT_TRUE(empty_policy.is_ok()) << empty_policy.status().message();
    EXPECT_EQ(empty_policy->version_policy.kind, VersionPolicy::Kind::kAll);  // as Triton loads it
    EXPECT_NE(error_of("version_policy: { all { } latest { } }" + io).find("exactly one of"), std::string::npos);
    // Triton makes a count below 1 one instance (NormalizeInstanceGroup); it did not load here.
    auto zero = parse("instance_group [ { kind: KIND_CPU count: 0 }, { count: -3 } ]" + io);
    ASSERT_TRUE(zero.is_ok()) << zero.status().message();
    EXPECT_EQ(zero->instance_count(), 2);
    EXPECT_TRUE(validate_model_config(*zero, "c").is_ok());
    EXPECT_NE(error_of(R"(input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] allow_ragged_batch: yes } ])")
                  .find("'allow_ragged_batch' must be true or false, got 'yes'"), std::string::npos);
    EXPECT_NE(error_of("max_batch_size: 09" + io).find("must be an integer, got '09'"), std::string::npos);
    EXPECT_NE(error_of("max_batch_size: 0x8000000000000000" + io).find("must be an integer"), std::string::npos);
    EXPECT_NE(error_of(R"(parameters { key: "a" value: { string_value: "1" } } parameters { key: "a" value: { string_value: "2" } })" + io)
                  .find("parameter 'a' is given twice"), std::string::npos);
    EXPECT_NE(error_of(R"(parameters { key: "a" value: { int_value: 1 } })" + io).find("unknown field 'int_value'"),
              std::string::npos);

    // JSON (the load API, and what /config prints): parameters named "key" and "value" are names.
    nlohmann::json j = {{"name", "m"},
                        {"input", {{{"name", "x"}, {"data_type", "TYPE_FP32"}, {"dims", {4}}}}},
                        {"output", {{{"name", "y"}, {"data_type", "TYPE_FP32"}, {"dims", {2}}}}},
                        {"parameters", {{"key", {{"string_value", "k"}}}, {"value", {{"string_value", "v"}}}}}};
    auto fromj = parse_model_config_json(j, "load");
    ASSERT_TRUE(fromj.is_ok()) << fromj.status().message();
    EXPECT_EQ(fromj->parameters.at("key"), "k");
    EXPECT_EQ(fromj->parameters.at("value"), "v");
    auto again = parse_model_config_json(model_config_to_json(*fromj), "load");
    ASSERT_TRUE(again.is_ok()) << again.status().message();
    EXPECT_EQ(again->parameters, fromj->parameters);
    j["parameters"] = {{"p", "bare"}};
    EXPECT_NE(parse_model_config_json(j, "load").status().message().find("parameter 'p' must be { string_value"),
              std::string::npos);

    // Dims whose product overflows, and warm-up data too large to make.
    EXPECT_NE(error_of(R"(input [ { name: "x" data_type: TYPE_FP32 dims: [ 4611686018427387904, 4 ] } ])"
                       R"( output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ])").find("(accepted)"),
              std::string::npos);  // (parsing accepts it; validation refuses:)
    auto big = parse(R"(input [ { name: "x" data_type: TYPE_FP32 dims: [ 4611686018427387904, 4 ] } ])"
                     R"( output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ])");
    ASSERT_TRUE(big.is_ok());
    EXPECT_NE(validate_model_config(*big, "c").message().find("hold more than 2^40 elements"), std::string::npos);
    auto warm = parse(R"(max_batch_size: 64 input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ])"
                      R"( output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ])"
                      R"( model_warmup [ { name: "w" batch_size: 64 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 10000000 ] zero_data: true } } } ])");
    ASSERT_TRUE(warm.is_ok()) << warm.status().message();
    EXPECT_NE(validate_model_config(*warm, "c").message().find("bytes of warm-up data for 64 rows (at most 1 GiB)"),
              std::string::npos) << validate_model_config(*warm, "c").message();
    EXPECT_NE(parse_model_config_toml("max_batch_size = 1979-05-27", "config.toml").status().message().find(
                  "config.toml:1: a date or time is no value"), std::string::npos);
}

}  // namespace
}  // namespace strato::serve
