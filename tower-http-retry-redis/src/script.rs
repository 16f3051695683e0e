//! The two Lua scripts of [`RedisStore`](super::RedisStore) (`read.lua`, `swap.lua`, beside
//! this file, where their keys, fields and expiry are written), each call under a timeout, and
//! their replies parsed.

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, RedisResult, Script, ServerErrorKind, Value};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tower_http_retry::pacing::store::remote::Record;
use tower_http_retry::pacing::store::StoreError;

/// The record of one endpoint as a call found it.
pub(super) struct Found {
    /// 0: absent.
    pub(super) version: u64,
    pub(super) record: Record,
}

/// What a compare-and-set did.
pub(super) enum Swap {
    /// The version matched; the state (if any) was written with this version.
    Done { version: u64 },
    /// Another process wrote first: the record as it is now.
    Conflict(Box<Found>),
}

/// A round trip: what it returned, when it was sent and answered (local), the server's time,
/// and the fleet's size.
pub(super) struct Trip<T> {
    pub(super) answer: T,
    pub(super) sent: Instant,
    pub(super) received: Instant,
    /// Since the server's epoch.
    pub(super) server: Duration,
    /// The processes that called the store in its last 10 s, this one included.
    pub(super) fleet: u32,
}

/// The keys and the caller of one script call.
#[derive(Clone, Copy)]
pub(super) struct Keys<'a> {
    /// The endpoint's record.
    pub(super) record: &'a str,
    /// The fleet's count of the processes that called lately.
    pub(super) fleet: &'a str,
    /// The calling process's holder id.
    pub(super) holder: u64,
}

/// A call that failed: what the caller is told, and whether Redis itself is away (a timeout,
/// a connection that failed, a server that cannot serve) or answered with an error that
/// concerns this call's key only (a key of another type, a record of another format), which
/// the other endpoints' calls do not meet.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) error: StoreError,
    pub(super) store_away: bool,
}

impl From<StoreError> for Failure {
    /// A failure of this call's key: a record that cannot be read, a compare-and-set that
    /// kept losing.
    fn from(error: StoreError) -> Self {
        Self {
            error,
            store_away: false,
        }
    }
}

impl Failure {
    fn redis(error: &RedisError) -> Self {
        // Redis answered, with an error for this command: the connection and the server are fine.
        let key_only = matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ResponseError)
                | ErrorKind::Extension
                | ErrorKind::UnexpectedReturnType
        );
        Self {
            error: StoreError::Unavailable(error.to_string()),
            store_away: !key_only,
        }
    }
}

/// The scripts, hashed once (`EVALSHA`, loaded again after `NOSCRIPT`: a restarted server).
pub(super) struct Scripts {
    read: Script,
    swap: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            read: Script::new(include_str!("read.lua")),
            swap: Script::new(include_str!("swap.lua")),
        }
    }

    /// `read.lua` on `keys`.
    pub(super) async fn read<C: ConnectionLike + Clone>(
        &self,
        connection: &C,
        keys: Keys<'_>,
        timeout: Duration,
    ) -> Result<Trip<Found>, Failure> {
        let mut connection = connection.clone();
        let mut invocation = self.read.key(keys.record);
        let invocation = invocation.key(keys.fleet).arg(keys.holder);
        let trip = timed(timeout, invocation.invoke_async::<Value>(&mut connection)).await?;
        let items = array(trip.answer, 5)?;
        let found = Found {
            version: integer(&items[0])?,
            record: Record::decode(bytes(&items[1])?)?,
        };
        Ok(Trip {
            server: server_time(&items[2], &items[3])?,
            fleet: fleet(&items[4])?,
            answer: found,
            sent: trip.sent,
            received: trip.received,
        })
    }

    /// `swap.lua` on `keys`: `write` (`None`: only check) if the record is still at `expected`.
    pub(super) async fn swap<C: ConnectionLike + Clone>(
        &self,
        connection: &C,
        keys: Keys<'_>,
        expected: u64,
        write: Option<(&[u8], u64)>,
        timeout: Duration,
    ) -> Result<Trip<Swap>, Failure> {
        let mut connection = connection.clone();
        let (state, ttl_ms) = write.unwrap_or((&[], 1));
        let mut invocation = self.swap.key(keys.record);
        let invocation = invocation
            .key(keys.fleet)
            .arg(expected)
            .arg(state)
            .arg(ttl_ms)
            .arg(first_version())
            .arg(keys.holder);
        let trip = timed(timeout, invocation.invoke_async::<Value>(&mut connection)).await?;
        let items = array(trip.answer, 6)?;
        let version = integer(&items[1])?;
        let answer = if integer(&items[0])? == 1 {
            Swap::Done { version }
        } else {
            Swap::Conflict(Box::new(Found {
                version,
                record: Record::decode(bytes(&items[2])?)?,
            }))
        };
        Ok(Trip {
            server: server_time(&items[3], &items[4])?,
            fleet: fleet(&items[5])?,
            answer,
            sent: trip.sent,
            received: trip.received,
        })
    }
}

/// A random first version below 2^40 (Lua's numbers are exact up to 2^53).
fn first_version() -> u64 {
    1 + rand::random::<u64>() % (1 << 40)
}

/// `call` within `timeout`, timed.
async fn timed<T>(
    timeout: Duration,
    call: impl Future<Output = RedisResult<T>>,
) -> Result<Trip<T>, Failure> {
    let sent = Instant::now();
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => Ok(Trip {
            answer,
            sent,
            received: Instant::now(),
            server: Duration::ZERO,
            fleet: 1,
        }),
        Ok(Err(error)) => Err(Failure::redis(&error)),
        Err(_) => Err(Failure {
            error: StoreError::Timeout(timeout),
            store_away: true,
        }),
    }
}

fn array(value: Value, len: usize) -> Result<Vec<Value>, StoreError> {
    match value {
        Value::Array(items) if items.len() == len => Ok(items),
        _ => Err(StoreError::Malformed),
    }
}

fn bytes(value: &Value) -> Result<&[u8], StoreError> {
    match value {
        Value::BulkString(bytes) => Ok(bytes),
        Value::SimpleString(text) => Ok(text.as_bytes()),
        _ => Err(StoreError::Malformed),
    }
}

fn integer(value: &Value) -> Result<u64, StoreError> {
    match value {
        Value::Int(n) => u64::try_from(*n).map_err(|_| StoreError::Malformed),
        other => std::str::from_utf8(bytes(other)?)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or(StoreError::Malformed),
    }
}

/// The fleet's count (at least 1: the caller).
fn fleet(value: &Value) -> Result<u32, StoreError> {
    Ok(u32::try_from(integer(value)?).unwrap_or(u32::MAX).max(1))
}

/// `TIME`'s seconds and microseconds.
fn server_time(seconds: &Value, micros: &Value) -> Result<Duration, StoreError> {
    Ok(Duration::from_secs(integer(seconds)?) + Duration::from_micros(integer(micros)?))
}
