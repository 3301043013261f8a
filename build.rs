//! Link settings for the ROS 2 node when it is built against the ROS 2 that scripts/ros.sh
//! installs from the Python package registry (docs/ROS.md, "ROS 2 without ROS"): that librcl
//! needs CPython's symbols at run time, and its libraries are found through an rpath rather
//! than LD_LIBRARY_PATH. Against a ROS 2 installed the usual way, nothing is added.

fn main() {
    println!("cargo:rerun-if-env-changed=SION_ROS_LIBS");
    println!("cargo:rerun-if-env-changed=SION_PYTHON_LIBDIR");
    if std::env::var_os("CARGO_FEATURE_ROS").is_none() {
        return;
    }
    let Ok(libs) = std::env::var("SION_ROS_LIBS") else { return };
    let python_dir = std::env::var("SION_PYTHON_LIBDIR").unwrap_or_default();
    let python = std::env::var("SION_PYTHON_LIB").unwrap_or_else(|_| "python3.11".into());
    let link = |arg: &str| println!("cargo:rustc-link-arg={arg}");
    link("-Wl,--disable-new-dtags");
    for dir in libs.split(':').chain([python_dir.as_str()]).filter(|d| !d.is_empty()) {
        link(&format!("-L{dir}"));
        link(&format!("-Wl,-rpath,{dir}"));
    }
    link("-Wl,--no-as-needed");
    link(&format!("-l{python}"));
    link("-Wl,--as-needed");
}
