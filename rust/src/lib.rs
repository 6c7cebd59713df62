//! pilotfish._core: the agent's hot paths (placement, spawning and reaping), mechanism only.
//!
//! The logic lives in plain Rust modules that `cargo test --no-default-features` exercises
//! without Python; `py` is a thin PyO3 layer over them.

pub mod executor;
pub mod placer;

#[cfg(feature = "python")]
mod py;
