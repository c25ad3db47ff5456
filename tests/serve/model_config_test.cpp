#include "strato/serve/repository/model_config.h"

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

TEST(ModelConfig, ValidationCatchesInconsistentConfigs) {
    ModelConfig c;
    c.name = "m";
    c.inputs.push_back({"x", DataType::kFp32, {4}, false, ""});
    c.outputs.push_back({"y", DataType::kFp32, {2}, false, ""});
    EXPECT_TRUE(validate_model_config(c, "c").is_ok());
    c.dynamic_batching = DynamicBatching{};
    EXPECT_NE(validate_model_config(c, "c").message().find("needs max_batch_size > 0"), std::string::npos);
    c.max_batch_size = 4;
    c.dynamic_batching->preferred_batch_size = {8};
    EXPECT_NE(validate_model_config(c, "c").message().find("preferred_batch_size 8"), std::string::npos);
    c.dynamic_batching->preferred_batch_size = {};
    c.inputs[0].dims = {};
    EXPECT_NE(validate_model_config(c, "c").message().find("needs dims"), std::string::npos);
    c.inputs[0].dims = {0};
    EXPECT_FALSE(validate_model_config(c, "c").is_ok());
}

}  // namespace
}  // namespace strato::serve
