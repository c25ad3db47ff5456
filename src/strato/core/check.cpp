#include "strato/core/check.h"

#include <fmt/format.h>

namespace strato::detail {

void throw_check(const char* cond, const char*, int, const std::string& msg) {
    throw Error(StatusCode::kInvalidArgument, msg.empty() ? fmt::format("check failed: {}", cond) : msg);
}

void throw_assert(const char* cond, const char* file, int line, const std::string& msg) {
    throw Error(StatusCode::kInternal,
                fmt::format("internal assertion failed: {} at {}:{}{}{} (this is a bug in strato)", cond, file, line,
                            msg.empty() ? "" : ": ", msg));
}

}  // namespace strato::detail
