//! A rosbag2 metadata.yaml as `sion replay DIR` reads it: any text gives the bag's files or a
//! refusal naming the line, never a panic; no file it names leaves the bag's directory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(files) = sion_bag::rosbag2::metadata_files(text) {
        for f in files {
            assert!(
                std::path::Path::new(&f).components().all(|c| matches!(c, std::path::Component::Normal(_)))
            );
        }
    }
});
