//! The ROS package and the Rust package say the same version: colcon, rosdep and `ros2 pkg`
//! read package.xml, cargo and `sion --version` read Cargo.toml.

use std::path::Path;

/// The text of the first `<version>` element of a package.xml.
fn version_in(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = text.find("<version>").map(|i| i + "<version>".len()).expect("a <version> element");
    let end = text[start..].find("</version>").expect("</version>") + start;
    text[start..end].trim().to_owned()
}

#[test]
fn package_xml_and_cargo_say_the_same_version() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = env!("CARGO_PKG_VERSION");
    for xml in ["package.xml", "msg/package.xml"] {
        assert_eq!(version_in(&root.join(xml)), cargo, "{xml} and Cargo.toml disagree");
    }
}
