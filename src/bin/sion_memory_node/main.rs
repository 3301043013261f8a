//! The ROS 2 node: `ros2 launch sion_memory robot.launch.py` starts this (docs/ROS.md). Its
//! arguments are ROS's (`--ros-args --params-file …`), read by rcl; this binary adds `--help`
//! and `--list-parameters`, sets up logging, and runs [`sion_memory::ros::run`].

// Two unsafe calls, to the allocator (its mmap threshold, its counters); nothing else.
#![deny(unsafe_code)]

use std::process::ExitCode;

use sion_memory::ros::Params;

fn help() -> String {
    let mut out = String::from(
        "sion_memory_node: the robot's provable memory as a ROS 2 node.\n\n\
         Subscribes to pose, odometry, /tf, /tf_static, the map and a camera; remembers them as\n\
         atoms in a durable log; commits heads to the ledger; serves /sion_memory/query_range,\n\
         query_subject, verify, remember, commit, revise, believe, forget and payload (and the\n\
         same verbs as MCP tools with mcp_listen); publishes /sion_memory/head and /stats.\n\n\
         Usage: sion_memory_node [--ros-args --params-file config/robot.yaml -p NAME:=VALUE ...]\n\
         \x20      sion_memory_node --list-parameters\n\nParameters:\n",
    );
    // Each description whole, wrapped at 100 columns beside its name.
    for (name, description, default) in Params::declared() {
        let text = format!("{description} (default {default})");
        let mut line = format!("  {name:<24}");
        for word in text.split_whitespace() {
            // A line holds at least one word beside its name, however long the word.
            if line.len() > 26 && line.len() + 1 + word.len() > 100 {
                out.push_str(&line);
                out.push('\n');
                line = " ".repeat(26);
            }
            line.push(' ');
            line.push_str(word);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Large buffers (camera frames, ~1 MB each at 30 Hz) from the operating system every time,
/// given back when freed. glibc's default raises its mmap threshold to the largest buffer
/// freed, after which frames come from the threads' heaps and stay resident: under
/// examples/ros_load the node grew ~5 MiB a minute that way, and ~0.7 with this (docs/ROS.md,
/// "Measured"). `MALLOC_MMAP_THRESHOLD_` in the environment still decides, if set.
fn fix_mmap_threshold() {
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before any thread starts.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        }
    }
}

/// Bytes malloc holds from the system (its heaps and mapped chunks) and bytes of them in use,
/// over every arena. glibc only: elsewhere nothing is reported.
fn malloc_bytes() -> Option<(u64, u64)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters; it takes no arguments.
        #[allow(unsafe_code)]
        let m = unsafe { libc::mallinfo2() };
        let held = (m.arena + m.hblkhd) as u64;
        Some((held, (m.uordblks + m.hblkhd) as u64))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// Once a minute, where the node's resident memory is: anonymous pages (split into what
/// malloc has in use and what it holds), file pages, shared memory (Fast DDS' segments). A node
/// that lives for months must stay flat; this line says which part moved if it does not.
fn log_process_memory() {
    let field = |status: &str, name: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(f64::NAN, |kib| kib as f64 / 1024.0)
    };
    // Once a minute; SION_MEMORY_LINE_S asks for it more often (measuring a restart, say).
    let every = std::env::var("SION_MEMORY_LINE_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.1)
        .unwrap_or(60.0);
    let spawned = std::thread::Builder::new().name("memory-line".into()).spawn(move || {
        loop {
            std::thread::sleep(std::time::Duration::from_secs_f64(every));
            let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let heap = malloc_bytes().map_or_else(String::new, |(held, used)| {
                let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
                format!(", malloc {:.1} MiB in use of {:.1} held", mib(used), mib(held))
            });
            tracing::info!(
                "process memory: resident {:.1} MiB (anonymous {:.1}, file {:.1}, shared {:.1}){heap}",
                field(&status, "VmRSS:"),
                field(&status, "RssAnon:"),
                field(&status, "RssFile:"),
                field(&status, "RssShmem:"),
            );
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("no memory line: {e}");
    }
}

fn main() -> ExitCode {
    fix_mmap_threshold();
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{}", help());
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--list-parameters") {
        for (name, ..) in Params::declared() {
            println!("{name}");
        }
        return ExitCode::SUCCESS;
    }
    // Once the node exists its log goes through rcl and on /rosout, at the level `--ros-args
    // --log-level` sets (RUST_LOG, if set, decides instead); before, to stderr.
    use tracing_subscriber::prelude::*;
    let level = sion_memory::ros::log::ros_log_level(&args, "sion_memory").unwrap_or(tracing::Level::INFO);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(if level == tracing::Level::DEBUG {
            "info,sion_memory=debug,sion_brain=debug,sion_store=debug,sion_ingest=debug".to_owned()
        } else {
            level.as_str().to_ascii_lowercase()
        })
    });
    let console = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            !sion_memory::ros::log::through_rcl_now() && *meta.level() <= tracing::Level::INFO
        }));
    tracing_subscriber::registry().with(filter).with(console).with(sion_memory::ros::log::RclLayer).init();
    log_process_memory();
    let outcome = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(sion_memory::ros::run()));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sion_memory_node: {e:#}");
            ExitCode::FAILURE
        }
    }
}
