#pragma once
// STRATO_CHECK: bad input inside computational code; throws strato::Error with a message that is
// built only on failure. STRATO_ASSERT: an invariant; a bug if it fires (throws InternalError).

#include <sstream>
#include <stdexcept>
#include <string>

#include "strato/core/status.h"

namespace strato {

/// An exception that carries a StatusCode; catch it once at a boundary and turn it into a Status.
class Error : public std::runtime_error {
public:
    Error(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    StatusCode code() const { return code_; }
    Status status() const { return {code_, what()}; }

private:
    StatusCode code_;
};

namespace detail {
template <typename... Args>
std::string cat(const Args&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}
[[noreturn]] void throw_check(const char* cond, const char* file, int line, const std::string& msg);
[[noreturn]] void throw_assert(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace strato

#define STRATO_CHECK(cond, ...)                                                                         \
    do {                                                                                                \
        if (!(cond)) [[unlikely]]                                                                       \
            ::strato::detail::throw_check(#cond, __FILE__, __LINE__, ::strato::detail::cat(__VA_ARGS__)); \
    } while (0)

#define STRATO_ASSERT(cond, ...)                                                                         \
    do {                                                                                                 \
        if (!(cond)) [[unlikely]]                                                                        \
            ::strato::detail::throw_assert(#cond, __FILE__, __LINE__, ::strato::detail::cat("" __VA_OPT__(, ) __VA_ARGS__)); \
    } while (0)
