//! Request and response bodies around retries.

mod buffer;
mod release;
mod replay;

pub use buffer::{BufferRequest, BufferRequestFuture, BufferRequestLayer};
pub use release::{
    ReleaseBody, ReleaseBodyFuture, ReleaseBodyLayer, ReleaseBodyLayerBuilder, ReleasedBody,
};
pub use replay::ReplayBody;
