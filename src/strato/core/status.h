#pragma once
// Status and Result<T>: the error currency at service boundaries (config parse, file I/O,
// model load, HTTP requests). Codes map onto HTTP statuses so the server can reuse them.

#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

namespace strato {

enum class StatusCode {
    kOk = 0,
    kInvalidArgument,  // bad input from the user: config, flags, request
    kNotFound,         // file, model, key
    kAlreadyExists,
    kPermissionDenied,
    kDataLoss,         // checksum mismatch, truncated file
    kUnavailable,      // transient: try again
    kUnimplemented,
    kCancelled,        // interrupted by a signal
    kInternal,         // a bug
    kIo,               // the OS refused a read or write
};

const char* status_code_name(StatusCode code);
int status_code_to_http(StatusCode code);

/// The outcome of an operation: ok, or a code and a message that says what, where and
/// what was expected. Cheap to copy when ok.
class [[nodiscard]] Status {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return {}; }

    bool is_ok() const { return code_ == StatusCode::kOk; }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    std::string to_string() const;

    /// Prefixes the message with context ("loading model/x: " + message).
    Status with_context(std::string_view context) const;

private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
    return {StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
    return {StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status data_loss(fmt::format_string<Args...> f, Args&&... args) {
    return {StatusCode::kDataLoss, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status io_error(fmt::format_string<Args...> f, Args&&... args) {
    return {StatusCode::kIo, fmt::format(f, std::forward<Args>(args)...)};
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
    return {StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...)};
}

/// A value or the Status that says why there is none.
template <typename T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
    Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

    bool is_ok() const { return v_.index() == 0; }
    explicit operator bool() const { return is_ok(); }
    const Status& status() const {
        static const Status kOk;
        return is_ok() ? kOk : std::get<1>(v_);
    }
    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

private:
    std::variant<T, Status> v_;
};

}  // namespace strato

#define STRATO_CONCAT_INNER_(a, b) a##b
#define STRATO_CONCAT_(a, b) STRATO_CONCAT_INNER_(a, b)

#define STRATO_RETURN_IF_ERROR(expr)                     \
    do {                                                 \
        ::strato::Status strato_status_ = (expr);        \
        if (!strato_status_.is_ok()) return strato_status_; \
    } while (0)

#define STRATO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
    auto tmp = (expr);                                \
    if (!tmp.is_ok()) return tmp.status();            \
    lhs = std::move(tmp).value()

#define STRATO_ASSIGN_OR_RETURN(lhs, expr) \
    STRATO_ASSIGN_OR_RETURN_IMPL_(STRATO_CONCAT_(strato_result_, __LINE__), lhs, expr)
