//! What the root tests share: the helpers every crate's tests use (sion_testkit).

#![allow(dead_code, unused_imports)]

pub use sion_testkit::{FRAMES, copy_dir, random_atoms};
