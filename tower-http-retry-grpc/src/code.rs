//! The gRPC status codes, and how an HTTP status maps onto them.

use http::StatusCode;
use std::fmt;

/// A gRPC status code (`grpc-status`), as the gRPC specification numbers them.
///
/// This crate's own small enum, so that the library needs no gRPC stack: the numbers are
/// those of `google.rpc.Code` (and of `tonic::Code`).
///
/// ```
/// use tower_http_retry_grpc::GrpcCode;
///
/// assert_eq!(GrpcCode::from_i32(14), GrpcCode::Unavailable);
/// assert_eq!(GrpcCode::from_i32(99), GrpcCode::Unknown);
/// assert_eq!(GrpcCode::from_name("RESOURCE_EXHAUSTED"), Some(GrpcCode::ResourceExhausted));
/// assert_eq!(GrpcCode::Unavailable.name(), "UNAVAILABLE");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum GrpcCode {
    /// 0: not an error.
    Ok = 0,
    /// 1: cancelled, typically by the caller.
    Cancelled = 1,
    /// 2: an unknown error.
    Unknown = 2,
    /// 3: the client sent an invalid argument.
    InvalidArgument = 3,
    /// 4: the deadline expired before the operation could complete.
    DeadlineExceeded = 4,
    /// 5: some requested entity was not found.
    NotFound = 5,
    /// 6: the entity the client tried to create already exists.
    AlreadyExists = 6,
    /// 7: the caller may not execute the operation.
    PermissionDenied = 7,
    /// 8: a resource (a quota, the server's capacity) is used up.
    ResourceExhausted = 8,
    /// 9: the system is not in a state the operation needs.
    FailedPrecondition = 9,
    /// 10: the operation was aborted (a concurrency conflict).
    Aborted = 10,
    /// 11: the operation was attempted past the valid range.
    OutOfRange = 11,
    /// 12: the operation is not implemented or supported.
    Unimplemented = 12,
    /// 13: an internal error.
    Internal = 13,
    /// 14: the service is currently unavailable: the transient condition a retry is for.
    Unavailable = 14,
    /// 15: unrecoverable data loss or corruption.
    DataLoss = 15,
    /// 16: the request has no valid authentication credentials.
    Unauthenticated = 16,
}

impl GrpcCode {
    /// Every code, in numeric order.
    pub const ALL: [GrpcCode; 17] = [
        GrpcCode::Ok,
        GrpcCode::Cancelled,
        GrpcCode::Unknown,
        GrpcCode::InvalidArgument,
        GrpcCode::DeadlineExceeded,
        GrpcCode::NotFound,
        GrpcCode::AlreadyExists,
        GrpcCode::PermissionDenied,
        GrpcCode::ResourceExhausted,
        GrpcCode::FailedPrecondition,
        GrpcCode::Aborted,
        GrpcCode::OutOfRange,
        GrpcCode::Unimplemented,
        GrpcCode::Internal,
        GrpcCode::Unavailable,
        GrpcCode::DataLoss,
        GrpcCode::Unauthenticated,
    ];

    /// The code numbered `value`; a number outside 0..=16 is [`Unknown`](Self::Unknown), as
    /// gRPC reads it.
    pub fn from_i32(value: i32) -> Self {
        usize::try_from(value)
            .ok()
            .and_then(|index| Self::ALL.get(index).copied())
            .unwrap_or(GrpcCode::Unknown)
    }

    /// The code's number.
    pub const fn as_i32(self) -> i32 {
        self as i32
    }

    /// The code named `name` in the service config's spelling (`"UNAVAILABLE"`), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|code| code.name() == name)
    }

    /// The name of the code as the service config spells it (`"UNAVAILABLE"`).
    pub const fn name(self) -> &'static str {
        match self {
            GrpcCode::Ok => "OK",
            GrpcCode::Cancelled => "CANCELLED",
            GrpcCode::Unknown => "UNKNOWN",
            GrpcCode::InvalidArgument => "INVALID_ARGUMENT",
            GrpcCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            GrpcCode::NotFound => "NOT_FOUND",
            GrpcCode::AlreadyExists => "ALREADY_EXISTS",
            GrpcCode::PermissionDenied => "PERMISSION_DENIED",
            GrpcCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            GrpcCode::FailedPrecondition => "FAILED_PRECONDITION",
            GrpcCode::Aborted => "ABORTED",
            GrpcCode::OutOfRange => "OUT_OF_RANGE",
            GrpcCode::Unimplemented => "UNIMPLEMENTED",
            GrpcCode::Internal => "INTERNAL",
            GrpcCode::Unavailable => "UNAVAILABLE",
            GrpcCode::DataLoss => "DATA_LOSS",
            GrpcCode::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The code gRPC gives a response whose HTTP status is not 200 and that carries no
    /// `grpc-status` (gRPC's `doc/http-grpc-status-mapping.md`): 400 → INTERNAL,
    /// 401 → UNAUTHENTICATED, 403 → PERMISSION_DENIED, 404 → UNIMPLEMENTED,
    /// 429, 502, 503, 504 → UNAVAILABLE, any other → UNKNOWN.
    pub fn of_http_status(status: StatusCode) -> Self {
        match status.as_u16() {
            400 => GrpcCode::Internal,
            401 => GrpcCode::Unauthenticated,
            403 => GrpcCode::PermissionDenied,
            404 => GrpcCode::Unimplemented,
            429 | 502 | 503 | 504 => GrpcCode::Unavailable,
            _ => GrpcCode::Unknown,
        }
    }

    /// This code's bit in a set of codes.
    pub(crate) const fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

impl fmt::Display for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.as_i32())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_its_own_number_and_name() {
        for (number, code) in GrpcCode::ALL.into_iter().enumerate() {
            assert_eq!(code.as_i32(), number as i32);
            assert_eq!(GrpcCode::from_i32(number as i32), code);
            assert_eq!(GrpcCode::from_name(code.name()), Some(code));
        }
        assert_eq!(GrpcCode::from_i32(-1), GrpcCode::Unknown);
        assert_eq!(GrpcCode::from_i32(17), GrpcCode::Unknown);
        assert_eq!(GrpcCode::from_name("unavailable"), None);
    }

    #[test]
    fn http_statuses_map_as_grpc_maps_them() {
        let cases = [
            (400, GrpcCode::Internal),
            (401, GrpcCode::Unauthenticated),
            (403, GrpcCode::PermissionDenied),
            (404, GrpcCode::Unimplemented),
            (429, GrpcCode::Unavailable),
            (502, GrpcCode::Unavailable),
            (503, GrpcCode::Unavailable),
            (504, GrpcCode::Unavailable),
            (500, GrpcCode::Unknown),
            (301, GrpcCode::Unknown),
        ];
        for (status, code) in cases {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(GrpcCode::of_http_status(status), code, "{status}");
        }
    }
}
