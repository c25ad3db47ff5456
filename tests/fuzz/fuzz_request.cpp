// libFuzzer target for everything a client controls before a model runs: the inference request
// decoder (JSON, binary tensor extension, raw bodies), the response encoder/decoder round trip,
// and the model-config parsers the load API and repositories feed (pbtxt, JSON).
//   tests/fuzz/run.sh SECONDS   (builds with clang -fsanitize=fuzzer,address,undefined)

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "strato/serve/protocol/codec.h"
#include "strato/serve/repository/model_config.h"

using namespace strato::serve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (mode % 4) {
        case 0:
        case 1: {
            std::optional<size_t> hl;
            if (mode % 4 == 1 && rest.size() >= 2) {
                hl = (static_cast<size_t>(static_cast<uint8_t>(rest[0])) << 8 | static_cast<uint8_t>(rest[1])) % (rest.size() - 1);
                rest.remove_prefix(2);
                if (*hl > rest.size()) hl = rest.size();
            }
            auto r = decode_infer_request(rest, hl);
            if (!r.is_ok() || r->raw) return 0;  // raw bodies are typed by the server from the model
            // Whatever decodes must encode into a response that decodes back to the same tensors.
            InferResponse resp;
            resp.model_name = "m";
            for (auto& t : r->inputs) {
                resp.binary.push_back(t.data.size() % 2 == 0);
                resp.outputs.push_back(t);
            }
            EncodedBody e = encode_infer_response(resp);
            auto back = decode_infer_response(e.body, e.header_length);
            if (!back.is_ok()) {
                fprintf(stderr, "round trip failed: %s\n%s\n", back.status().message().c_str(), e.body.substr(0, e.header_length).c_str());
                std::abort();
            }
            for (size_t i = 0; i < resp.outputs.size(); ++i) {
                const Tensor& a = resp.outputs[i];
                const Tensor& b = back->outputs[i];
                bool floats = a.dtype == DataType::kFp32 || a.dtype == DataType::kFp64;
                // JSON prints non-finite floats as null, which cannot round-trip; binary must.
                if (a.shape != b.shape || (a.data != b.data && (back->binary[i] || !floats))) std::abort();
            }
            return 0;
        }
        case 2:
            (void)parse_model_config_pbtxt(rest, "fuzz.pbtxt");
            return 0;
        default: {
            auto j = nlohmann::json::parse(rest, nullptr, false);
            if (!j.is_discarded()) {
                auto c = parse_model_config_json(j, "fuzz.json");
                if (c.is_ok()) (void)model_config_to_json(*c);
            }
            return 0;
        }
    }
}
