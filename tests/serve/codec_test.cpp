#include "strato/serve/protocol/codec.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>

namespace strato::serve {
namespace {

std::string floats(std::initializer_list<float> v) {
    std::string s(v.size() * 4, '\0');
    std::memcpy(s.data(), std::data(v), s.size());
    return s;
}

TEST(Codec, AHugeShapeWithLittleDataIsAnErrorNotAnAllocation) {
    // Found by the fuzzer: the shape claimed 888,888,888,880 elements and the decoder reserved
    // that much before counting the two that came.
    auto r = decode_infer_request(
        R"({"inputs":[{"name":"s","shape":[888888888880],"datatype":"BYTES","data":["ab","c"]}]})", std::nullopt);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("888888888880 elements"), std::string::npos) << r.status().message();
}

TEST(Codec, JsonRequestNestedAndFlatDataGiveTheSameBytes) {
    auto a = decode_infer_request(R"({"id":"7","inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4.5]]}]})", {});
    auto b = decode_infer_request(R"({"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3,4.5]}]})", {});
    ASSERT_TRUE(a.is_ok()) << a.status().message();
    ASSERT_TRUE(b.is_ok());
    EXPECT_EQ(a->id, "7");
    EXPECT_EQ(a->inputs[0].data, floats({1, 2, 3, 4.5f}));
    EXPECT_EQ(a->inputs[0].data, b->inputs[0].data);
}

TEST(Codec, BinaryRequestSplitsTheTailByBinaryDataSize) {
    std::string x = floats({1, 2, 3}), y("\x01\x00\x01", 3);
    std::string header =
        R"({"inputs":[{"name":"x","shape":[3],"datatype":"FP32","parameters":{"binary_data_size":12}},)"
        R"({"name":"y","shape":[3],"datatype":"BOOL","parameters":{"binary_data_size":3}}],)"
        R"("outputs":[{"name":"o","parameters":{"binary_data":true,"classification":2}}]})";
    auto r = decode_infer_request(header + x + y, header.size());
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->inputs[0].data, x);
    EXPECT_EQ(r->inputs[1].data, y);
    ASSERT_EQ(r->outputs.size(), 1u);
    EXPECT_TRUE(r->outputs[0].binary);
    EXPECT_EQ(r->outputs[0].classification, 2);
}

TEST(Codec, BytesTensorsAreLengthPrefixed) {
    auto r = decode_infer_request(R"({"inputs":[{"name":"s","shape":[2],"datatype":"BYTES","data":["ab",""]}]})", {});
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->inputs[0].data, std::string("\x02\x00\x00\x00" "ab" "\x00\x00\x00\x00", 10));
    EXPECT_EQ(count_bytes_elements(r->inputs[0].data), 2);
}

void expect_error(std::string_view body, std::string_view fragment, std::optional<size_t> hl = {}) {
    auto r = decode_infer_request(body, hl);
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(Codec, RejectsMalformedRequestsWithPreciseMessages) {
    expect_error("{", "failed to parse the request body as JSON");
    expect_error("[]", "must be a JSON object");
    expect_error(R"({"inputs":{}})", "'inputs' array");
    expect_error(R"({"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1]}]})", "has 2 elements but 'data' holds 1");
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP99","data":[1]}]})", "unknown datatype 'FP99'");
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP16","data":[1]}]})", "binary tensor data extension");
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[300]}]})", "out of range");
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT32","data":[1.5]}]})", "expected an integer");
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[1]}]})", "input 'x': expected true or false, got 1");
    // the input is named once (it was "input 'input 'x''"), the value shown short
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[true]}]})", "input 'x': expected a number, got true");
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[null]}]})", "input 'x': expected an integer, got null");
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[256]}]})", "input 'x': value 256 is out of range");
    auto r = decode_infer_request(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[")" + std::string(100000, 'a') +
                                  R"("]}]})", {});
    ASSERT_FALSE(r.is_ok());
    EXPECT_LT(r.status().message().size(), 200u) << r.status().message().substr(0, 300);
    expect_error(R"({"inputs":[{"name":"x","shape":[-1],"datatype":"FP32","data":[1]}]})", "non-negative integers");
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]},{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]})",
                 "given twice");
    expect_error(R"({"parameters":{"triton_x":1},"inputs":[]})", "reserved for Triton usage");
    std::string past = R"({"inputs":[{"name":"x","shape":[4],"datatype":"FP32","parameters":{"binary_data_size":16}}]})";
    expect_error(past + "abcd", "runs past the end", past.size());
    expect_error(R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP64","data":[99994e4444444444444444]}]})", "failed to parse");
    std::string deep(100000, '[');
    expect_error(deep, "nests deeper");
}

TEST(Codec, TrailingBinaryBytesNotClaimedAreAnError) {
    std::string h = R"({"inputs":[]})";
    auto r = decode_infer_request(h + "xyz", h.size());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("no input's binary_data_size accounts for"), std::string::npos);
}

// nlohmann's parser stops at a NUL byte: a JSON body followed by "\0" and anything parsed, the
// rest ignored, and binary tensors sent without Inference-Header-Content-Length got a message
// about binary_data_size running past the end of the body.
TEST(Codec, ANulByteInTheJsonIsAnErrorThatNamesTheMissingHeader) {
    const std::string json =
        R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]})";
    const std::string tail("\0\0\x80?", 4);  // 1.0f
    auto r = decode_infer_request(json + tail, std::nullopt);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("Inference-Header-Content-Length"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(std::to_string(json.size())), std::string::npos) << r.status().message();
    EXPECT_TRUE(decode_infer_request(json + tail, json.size()).is_ok());
    const std::string plain = R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]})";
    EXPECT_FALSE(decode_infer_request(plain + std::string(1, '\0') + "junk", std::nullopt).is_ok());
    auto in_header = decode_infer_request(plain + std::string(1, '\0'), plain.size() + 1);
    ASSERT_FALSE(in_header.is_ok());
    EXPECT_NE(in_header.status().message().find("NUL byte"), std::string::npos) << in_header.status().message();
    EXPECT_FALSE(decode_infer_response(R"({"outputs":[]})" + std::string(1, '\0'), std::nullopt).is_ok());
}

TEST(Codec, HeaderLengthIsValidated) {
    EXPECT_FALSE(parse_header_length("12x", 100).is_ok());
    EXPECT_FALSE(parse_header_length("", 100).is_ok());
    EXPECT_FALSE(parse_header_length("101", 100).is_ok());
    EXPECT_EQ(*parse_header_length("100", 100), 100u);
}

TEST(Codec, ResponseRoundTripsJsonAndBinary) {
    InferResponse resp;
    resp.model_name = "m";
    resp.model_version = "1";
    resp.id = "q\"1";
    resp.outputs.push_back({"a", DataType::kFp32, {2}, floats({0.1f, -2.5f})});
    resp.outputs.push_back({"b", DataType::kFp32, {1}, floats({3})});
    resp.binary = {false, true};
    EncodedBody e = encode_infer_response(resp);
    EXPECT_TRUE(e.has_binary);
    EXPECT_NE(e.body.find("[0.1,-2.5]"), std::string::npos) << e.body.substr(0, e.header_length);
    auto back = decode_infer_response(e.body, e.header_length);
    ASSERT_TRUE(back.is_ok()) << back.status().message();
    EXPECT_EQ(back->id, "q\"1");
    EXPECT_EQ(back->outputs[0].data, resp.outputs[0].data);
    EXPECT_EQ(back->outputs[1].data, resp.outputs[1].data);
}

TEST(Codec, RequestEncoderAndDecoderAgree) {
    InferRequest r;
    r.id = "x";
    r.inputs.push_back({"in", DataType::kInt64, {1, 2}, std::string("\x05\0\0\0\0\0\0\0\xfb\xff\xff\xff\xff\xff\xff\xff", 16)});
    r.outputs.push_back({"out", true, 0});
    for (bool binary : {false, true}) {
        EncodedBody e = encode_infer_request(r, binary);
        auto d = decode_infer_request(e.body, binary ? std::optional<size_t>(e.header_length) : std::nullopt);
        ASSERT_TRUE(d.is_ok()) << d.status().message();
        EXPECT_EQ(d->inputs[0].data, r.inputs[0].data);
        EXPECT_EQ(d->inputs[0].shape, r.inputs[0].shape);
        EXPECT_TRUE(d->outputs[0].binary);
    }
}

TEST(Codec, ClassificationGivesTopNWithLabels) {
    Tensor scores{"p", DataType::kFp32, {2, 3}, floats({0.1f, 0.7f, 0.2f, 0.5f, 0.2f, 0.3f})};
    auto c = classify(scores, 2, true, {"cat", "dog", "eel"});
    ASSERT_TRUE(c.is_ok());
    EXPECT_EQ(c->shape, (std::vector<int64_t>{2, 2}));
    InferResponse resp;
    resp.outputs.push_back(*c);
    std::string body = encode_infer_response(resp).body;
    // Triton writes scores as C's "%f" (std::to_string): six decimals.
    EXPECT_NE(body.find(R"(["0.700000:1:dog","0.200000:2:eel","0.500000:0:cat","0.300000:2:eel"])"), std::string::npos)
        << body;
    // Found by review: integer scores (Triton classifies them) were refused.
    Tensor counts{"c", DataType::kInt64, {3}, std::string(24, '\0')};
    const int64_t values[] = {-7, 40, 3};
    std::memcpy(counts.data.data(), values, sizeof values);
    auto ci = classify(counts, 2, false, {});
    ASSERT_TRUE(ci.is_ok()) << ci.status().message();
    InferResponse ri;
    ri.outputs.push_back(*ci);
    body = encode_infer_response(ri).body;
    EXPECT_NE(body.find(R"(["40:1","3:2"])"), std::string::npos) << body;
    Tensor text{"t", DataType::kBytes, {1}, std::string("\1\0\0\0x", 5)};
    EXPECT_FALSE(classify(text, 1, false, {}).is_ok());
}

// Found by review: names were checked against every earlier one (100k inputs took 22 s of an
// I/O thread); 2^64-1 as binary_data_size wrapped negative and counted as absent.
TEST(Codec, ManyInputNamesAreCheckedInLinearTimeAndHugeBinarySizesRefused) {
    std::string body = R"({"inputs":[)";
    for (int i = 0; i < 200000; ++i)
        body += fmt::format(R"({}{{"name":"i{}","shape":[1],"datatype":"FP32","data":[0]}})", i ? "," : "", i);
    body += R"(,{"name":"i7","shape":[1],"datatype":"FP32","data":[0]}]})";
    auto d = decode_infer_request(body, std::nullopt);
    ASSERT_FALSE(d.is_ok());
    EXPECT_NE(d.status().message().find("input 'i7' is given twice"), std::string::npos) << d.status().message();
    auto huge = decode_infer_request(
        R"({"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[0],"parameters":{"binary_data_size":18446744073709551615}}]})",
        std::nullopt);
    ASSERT_FALSE(huge.is_ok());
    EXPECT_NE(huge.status().message().find("'binary_data_size' 18446744073709551615 is larger than any request body"),
              std::string::npos)
        << huge.status().message();
}

}  // namespace
}  // namespace strato::serve
