//! The ROS 2 node: `ros2 launch sion_memory robot.launch.py` starts this (docs/ROS.md).

fn main() -> std::process::ExitCode {
    match sion_memory::ros::main() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sion_memory_node: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
