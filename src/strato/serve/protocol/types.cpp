#include "strato/serve/protocol/types.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <charconv>
#include <cstring>
#include <limits>

namespace strato::serve {
namespace {

struct TypeInfo {
    DataType type;
    std::string_view name;
    std::string_view config_name;
    size_t size;
};

constexpr std::array<TypeInfo, 14> kTypes{{
    {DataType::kBool, "BOOL", "TYPE_BOOL", 1},
    {DataType::kUint8, "UINT8", "TYPE_UINT8", 1},
    {DataType::kUint16, "UINT16", "TYPE_UINT16", 2},
    {DataType::kUint32, "UINT32", "TYPE_UINT32", 4},
    {DataType::kUint64, "UINT64", "TYPE_UINT64", 8},
    {DataType::kInt8, "INT8", "TYPE_INT8", 1},
    {DataType::kInt16, "INT16", "TYPE_INT16", 2},
    {DataType::kInt32, "INT32", "TYPE_INT32", 4},
    {DataType::kInt64, "INT64", "TYPE_INT64", 8},
    {DataType::kFp16, "FP16", "TYPE_FP16", 2},
    {DataType::kFp32, "FP32", "TYPE_FP32", 4},
    {DataType::kFp64, "FP64", "TYPE_FP64", 8},
    {DataType::kBytes, "BYTES", "TYPE_STRING", 0},
    {DataType::kBf16, "BF16", "TYPE_BF16", 2},
}};

const TypeInfo* find(DataType t) {
    for (const auto& i : kTypes)
        if (i.type == t) return &i;
    return nullptr;
}

}  // namespace

std::string_view datatype_name(DataType t) {
    const TypeInfo* i = find(t);
    return i ? i->name : "INVALID";
}

std::string_view datatype_config_name(DataType t) {
    const TypeInfo* i = find(t);
    return i ? i->config_name : "TYPE_INVALID";
}

DataType parse_datatype(std::string_view name) {
    for (const auto& i : kTypes)
        if (i.name == name) return i.type;
    return DataType::kInvalid;
}

DataType parse_config_datatype(std::string_view name) {
    for (const auto& i : kTypes)
        if (i.config_name == name) return i.type;
    // The enum's number, as protobuf's text format allows (kTypes is in model_config.proto's order:
    // TYPE_BOOL = 1 ... TYPE_BF16 = 14).
    size_t n = 0;
    if (auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
        ec == std::errc() && p == name.data() + name.size() && n >= 1 && n <= kTypes.size())
        return kTypes[n - 1].type;
    return DataType::kInvalid;
}

size_t datatype_size(DataType t) {
    const TypeInfo* i = find(t);
    return i ? i->size : 0;
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0) return -1;
        if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
        n *= d;
    }
    return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
    return fmt::format("[{}]", fmt::join(shape, ","));
}

int64_t count_bytes_elements(std::string_view data) {
    int64_t n = 0;
    size_t pos = 0;
    while (pos < data.size()) {
        if (data.size() - pos < 4) return -1;
        uint32_t len;
        std::memcpy(&len, data.data() + pos, 4);
        pos += 4;
        if (data.size() - pos < len) return -1;
        pos += len;
        ++n;
    }
    return n;
}

}  // namespace strato::serve
