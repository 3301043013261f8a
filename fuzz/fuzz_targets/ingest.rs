//! A message of any bytes on any stream (the first byte picks it): the CDR decoder and each
//! conversion (pose, odometry, TF, maps, images, camera info, scans, point clouds, IMU, GNSS,
//! 3D and 2D detections, other topics kept whole) must refuse it with a reason or make atoms
//! that are valid, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sion_ingest::{Ingest, IngestConfig, Stream};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let mut ingest = Ingest::new(IngestConfig::default());
    // Up to three messages, split where the input says, so a TF can precede what uses it.
    let mut parts = rest.splitn(3, |&b| b == 0xA5);
    let mut stream = Stream::ALL[usize::from(pick) % Stream::ALL.len()];
    for (i, message) in parts.by_ref().enumerate() {
        ingest.take(stream, message);
        stream = Stream::ALL[(usize::from(pick) / 8 + i) % Stream::ALL.len()];
    }
    ingest.flush();
});
