//! `google.rpc.RetryInfo`: the wait a server puts in a failed call's rich status
//! (`grpc-status-details-bin`, a base64 `google.rpc.Status` whose `details` may hold one), as
//! Google's APIs send it with RESOURCE_EXHAUSTED and UNAVAILABLE (AIP-194).
//!
//! Only the messages' fields read here are declared; the rest of a message is skipped, as
//! protobuf readers do.

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, Engine};
use http::header::{HeaderMap, HeaderName};
use std::time::Duration;

/// The rich status of a failed call (gRPC's `-bin` metadata: base64, padded or not).
pub(crate) static GRPC_STATUS_DETAILS_BIN: HeaderName =
    HeaderName::from_static("grpc-status-details-bin");

/// The type URL of `google.rpc.RetryInfo` in an `Any`.
const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// gRPC's `-bin` values are base64 with or without padding.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// `google.rpc.Status`: only its details.
#[derive(Clone, PartialEq, prost::Message)]
struct Status {
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// What a call's rich status says of retrying it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Details {
    /// No rich status, or one without a `RetryInfo`.
    Absent,
    /// A `RetryInfo`: wait this long.
    RetryAfter(Duration),
    /// A rich status that is not one (bad base64, bad protobuf, a negative delay).
    Malformed,
}

/// Reads the `RetryInfo` of `headers`' `grpc-status-details-bin`.
pub(crate) fn retry_info(headers: &HeaderMap) -> Details {
    let Some(value) = headers.get(&GRPC_STATUS_DETAILS_BIN) else {
        return Details::Absent;
    };
    let Ok(bytes) = BASE64.decode(value.as_bytes().trim_ascii()) else {
        return Details::Malformed;
    };
    let Ok(status) = <Status as prost::Message>::decode(bytes.as_slice()) else {
        return Details::Malformed;
    };
    let Some(info) = status.details.iter().find(|any| any.type_url == RETRY_INFO) else {
        return Details::Absent;
    };
    let Ok(info) = <RetryInfo as prost::Message>::decode(info.value.as_slice()) else {
        return Details::Malformed;
    };
    let delay = info.retry_delay.unwrap_or_default();
    match (u64::try_from(delay.seconds), u32::try_from(delay.nanos)) {
        (Ok(seconds), Ok(nanos)) if nanos < 1_000_000_000 => {
            Details::RetryAfter(Duration::new(seconds, nanos))
        }
        _ => Details::Malformed,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use http::HeaderValue;
    use prost::Message;

    /// A `grpc-status-details-bin` value: a `google.rpc.Status` with `details`.
    pub(crate) fn details_bin(details: Vec<(&str, Vec<u8>)>) -> HeaderValue {
        let status = Status {
            details: details
                .into_iter()
                .map(|(type_url, value)| Any {
                    type_url: type_url.to_owned(),
                    value,
                })
                .collect(),
        };
        let text = base64::engine::general_purpose::STANDARD_NO_PAD.encode(status.encode_to_vec());
        HeaderValue::try_from(text).unwrap()
    }

    /// A `RetryInfo` of `seconds` and `nanos`, encoded.
    pub(crate) fn retry_info_of(seconds: i64, nanos: i32) -> Vec<u8> {
        RetryInfo {
            retry_delay: Some(ProtoDuration { seconds, nanos }),
        }
        .encode_to_vec()
    }

    fn read(value: HeaderValue) -> Details {
        let mut headers = HeaderMap::new();
        headers.insert(&GRPC_STATUS_DETAILS_BIN, value);
        retry_info(&headers)
    }

    #[test]
    fn a_retry_info_among_the_details_is_the_wait() {
        // AIP-194's example: a RESOURCE_EXHAUSTED with `retry_delay { seconds: 37 }`, beside
        // another detail (an `ErrorInfo`, skipped).
        let value = details_bin(vec![
            (
                "type.googleapis.com/google.rpc.ErrorInfo",
                vec![0x0a, 0x03, b'a', b'b', b'c'],
            ),
            (RETRY_INFO, retry_info_of(37, 500_000_000)),
        ]);
        assert_eq!(
            read(value),
            Details::RetryAfter(Duration::from_millis(37_500))
        );
    }

    #[test]
    fn padded_base64_and_a_status_without_retry_info_are_read_too() {
        let status = Status {
            details: vec![Any {
                type_url: RETRY_INFO.to_owned(),
                value: retry_info_of(2, 0),
            }],
        };
        let padded = base64::engine::general_purpose::STANDARD.encode(status.encode_to_vec());
        let padded = HeaderValue::try_from(padded).unwrap();
        assert_eq!(read(padded), Details::RetryAfter(Duration::from_secs(2)));
        let other = details_bin(vec![("type.googleapis.com/google.rpc.DebugInfo", vec![])]);
        assert_eq!(read(other), Details::Absent);
        assert_eq!(retry_info(&HeaderMap::new()), Details::Absent);
    }

    #[test]
    fn a_rich_status_that_is_not_one_is_malformed() {
        assert_eq!(
            read(HeaderValue::from_static("not base64!")),
            Details::Malformed
        );
        // Valid base64, not a protobuf message (a field of wire type 7).
        assert_eq!(read(HeaderValue::from_static("/w")), Details::Malformed);
        let negative = details_bin(vec![(RETRY_INFO, retry_info_of(-1, 0))]);
        assert_eq!(read(negative), Details::Malformed);
    }
}
