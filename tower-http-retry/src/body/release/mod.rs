//! The body-release middleware: [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer) builds
//! [`ReleaseBody`](crate::body::ReleaseBody) services, whose
//! [`ReleaseBodyFuture`](crate::body::ReleaseBodyFuture) reads the body of a transient response
//! into a [`ReleasedBody`](crate::body::ReleasedBody). What the crate docs say of it is written on
//! [`ReleaseBodyLayer`](crate::body::ReleaseBodyLayer), where rustdoc shows it.

mod body;
mod config;
mod future;
mod layer;
mod service;

pub use body::ReleasedBody;
pub use future::ReleaseBodyFuture;
pub use layer::{ReleaseBodyLayer, ReleaseBodyLayerBuilder};
pub use service::ReleaseBody;
