#include "strato/core/status.h"

namespace strato {

const char* status_code_name(StatusCode code) {
    switch (code) {
        case StatusCode::kOk: return "ok";
        case StatusCode::kInvalidArgument: return "invalid argument";
        case StatusCode::kNotFound: return "not found";
        case StatusCode::kAlreadyExists: return "already exists";
        case StatusCode::kPermissionDenied: return "permission denied";
        case StatusCode::kDataLoss: return "data loss";
        case StatusCode::kUnavailable: return "unavailable";
        case StatusCode::kUnimplemented: return "unimplemented";
        case StatusCode::kCancelled: return "cancelled";
        case StatusCode::kInternal: return "internal";
        case StatusCode::kIo: return "i/o error";
    }
    return "unknown";
}

int status_code_to_http(StatusCode code) {
    switch (code) {
        case StatusCode::kOk: return 200;
        case StatusCode::kInvalidArgument: return 400;
        case StatusCode::kNotFound: return 404;
        case StatusCode::kAlreadyExists: return 409;
        case StatusCode::kPermissionDenied: return 403;
        case StatusCode::kUnavailable: return 503;
        case StatusCode::kUnimplemented: return 501;
        case StatusCode::kCancelled: return 400;  // Triton maps CANCELLED to 400 (499 is nginx's log-only code)
        case StatusCode::kDataLoss:
        case StatusCode::kInternal:
        case StatusCode::kIo: return 500;
    }
    return 500;
}

std::string Status::to_string() const {
    if (is_ok()) return "ok";
    return message_;
}

Status Status::with_context(std::string_view context) const {
    if (is_ok()) return *this;
    return {code_, fmt::format("{}: {}", context, message_)};
}

}  // namespace strato
