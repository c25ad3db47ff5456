#pragma once
// Tensors as the Open Inference Protocol (KServe v2 / Triton) carries them: a wire datatype, a
// shape and little-endian row-major bytes. No libtorch here: the protocol layer is shared by the
// server, the load generator and tests.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strato::serve {

enum class DataType : uint8_t {
    kInvalid,
    kBool,
    kUint8,
    kUint16,
    kUint32,
    kUint64,
    kInt8,
    kInt16,
    kInt32,
    kInt64,
    kFp16,
    kFp32,
    kFp64,
    kBytes,
    kBf16,
};

/// "FP32", "BYTES", ... (the protocol's names).
std::string_view datatype_name(DataType t);
/// "TYPE_FP32", "TYPE_STRING", ... (model configuration names).
std::string_view datatype_config_name(DataType t);
/// Parses a protocol name; kInvalid when unknown.
DataType parse_datatype(std::string_view name);
/// Parses a configuration name (TYPE_*) or its enum number (11 is TYPE_FP32); kInvalid when unknown.
DataType parse_config_datatype(std::string_view name);
/// Bytes per element; 0 for BYTES (variable length).
size_t datatype_size(DataType t);

/// Product of the dimensions; -1 when a dimension is negative, or when it overflows int64.
int64_t shape_numel(const std::vector<int64_t>& shape);
/// "[1,3,224,224]".
std::string shape_string(const std::vector<int64_t>& shape);

/// One named tensor. `data` holds the elements little-endian, row-major, unpadded; BYTES
/// elements are each a 4-byte little-endian length followed by the bytes.
struct Tensor {
    std::string name;
    DataType dtype = DataType::kInvalid;
    std::vector<int64_t> shape;
    std::string data;

    int64_t numel() const { return shape_numel(shape); }
};

/// Counts the elements of serialized BYTES data; -1 when it is malformed (a length runs past
/// the end).
int64_t count_bytes_elements(std::string_view data);

}  // namespace strato::serve
