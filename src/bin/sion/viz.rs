//! `sion viz`: a picture of a memory and of an answer with its proof, for the Rerun viewer.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use sion_memory::atom::BoxMm;

#[derive(Args)]
#[cfg_attr(not(feature = "viz"), allow(dead_code))]
#[command(group(clap::ArgGroup::new("sink").required(true).args(["out", "connect"])))]
pub struct VizArgs {
    /// The memory directory.
    #[arg(long, env = "SION_DATA")]
    data: PathBuf,
    /// Draw atoms in this frame (atoms in other frames are counted, not drawn; `/map` is `map`).
    #[arg(long, default_value = "map", value_parser = crate::common::frame_value)]
    frame: String,
    /// Ask what was seen in this box, X0,Y0,Z0,X1,Y1,Z1 (in --frame), each value with its unit
    /// (0m,0m,-1m,10m,8m,3m) or bare millimetres, and draw the answer and its proof. Edges
    /// count: boxes that touch answer.
    #[arg(long = "box", value_name = "X0,Y0,Z0,X1,Y1,Z1", allow_hyphen_values = true, value_parser = crate::common::box_value)]
    query_box: Option<BoxMm>,
    /// Start of the query's interval: RFC 3339, seconds with their unit (1767225600.5s) or bare
    /// nanoseconds [default: the beginning of time].
    #[arg(long, allow_hyphen_values = true, requires = "query_box", value_parser = crate::common::time_from)]
    from: Option<i64>,
    /// End of the query's interval (excluded), as --from [default: the end of time].
    #[arg(long, allow_hyphen_values = true, requires = "query_box", value_parser = crate::common::time_to)]
    to: Option<i64>,
    /// Answer as of the committed head with this many atoms [default: the latest].
    #[arg(long, requires = "query_box")]
    as_of: Option<u64>,
    /// Draw this proof file (from `sion memory recall --proof`) instead of asking --box.
    #[arg(long, conflicts_with = "query_box")]
    proof: Option<PathBuf>,
    /// Draw at most this many atoms of the log.
    #[arg(long, default_value_t = 200_000)]
    max_atoms: u64,
    /// Write the recording to this .rrd file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Stream to a running Rerun viewer instead [default address: the viewer's own,
    /// rerun+http://127.0.0.1:9876/proxy].
    #[arg(long, num_args = 0..=1, default_missing_value = "rerun+http://127.0.0.1:9876/proxy")]
    connect: Option<String>,
}

#[cfg(not(feature = "viz"))]
pub fn run(_: &VizArgs) -> Result<ExitCode> {
    anyhow::bail!(
        "this sion was built without Rerun: build it with `cargo build --release --features viz` \
         (the feature is off by default, the Rerun SDK is large)"
    )
}

#[cfg(feature = "viz")]
pub fn run(a: &VizArgs) -> Result<ExitCode> {
    use anyhow::Context as _;
    use sion_memory::index::geom::Query;
    use sion_memory::proof::ProofFile;
    use sion_memory::viz;

    use crate::common::open_memory_read_only;
    use crate::ui;

    let memory = open_memory_read_only(&a.data)?;
    let builder =
        rerun::RecordingStreamBuilder::new("sion_memory").recording_name(a.data.display().to_string());
    let rec = match (&a.out, &a.connect) {
        (Some(path), _) => builder.save(path).with_context(|| format!("creating {}", path.display()))?,
        (None, Some(url)) => {
            builder.connect_grpc_opts(url.clone()).with_context(|| format!("connecting to {url}"))?
        }
        (None, None) => unreachable!("clap requires --out or --connect"),
    };

    let size = memory.log().size();
    let bar = ui::bar(size, "atoms");
    let drawn =
        viz::draw_memory(&rec, memory.log(), memory.blobs(), &a.frame, a.max_atoms, |p| bar.set_position(p))
            .context("drawing the memory")?;
    bar.finish_and_clear();
    outln!(
        "drew {} atoms in frame {:?} ({} of them from other frames through the memory's transforms; {} map tiles, \
         {} camera frames, {} in their camera's frustum); {} atoms in other frames not placed{}",
        ui::count(drawn.atoms),
        a.frame,
        ui::count(drawn.through_transforms),
        drawn.map_tiles,
        drawn.images,
        drawn.frusta,
        ui::count(drawn.other_frames),
        if drawn.over_limit > 0 {
            format!(", {} past --max-atoms", ui::count(drawn.over_limit))
        } else {
            String::new()
        },
    );
    for ((frame, why), n) in &drawn.not_drawn {
        outln!("  not drawn: {} atoms in frame {frame:?}: {why}", ui::count(*n));
    }
    if drawn.blobs_not_drawn > 0 {
        outln!("{} blobs missing, not decodable or in an encoding not drawn", drawn.blobs_not_drawn);
    }

    let file = match (&a.query_box, &a.proof) {
        (Some(bounds), _) => {
            let query = Query::new(&a.frame, *bounds, a.from.unwrap_or(i64::MIN), a.to.unwrap_or(i64::MAX))
                .context("the query")?;
            Some(crate::common::prove_range_warned(&memory, &query, a.as_of)?.0)
        }
        (None, Some(path)) => {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Some(
                ProofFile::decode(&bytes)
                    .with_context(|| format!("{} is not a proof file", path.display()))?,
            )
        }
        (None, None) => None,
    };
    let mut code = ExitCode::SUCCESS;
    let (mut cameras, mut answered) = (drawn.cameras.clone(), false);
    if let Some(file) = file {
        let drawn = viz::draw_answer(&rec, &file, Some(&memory.ledger().public_key()), &|_, b| {
            memory.blobs().get(&b.hash).ok().map(|bytes| (b.media_type.clone(), bytes))
        })
        .context("drawing the answer")?;
        // The answer's cameras get a view each; the others' frames are in the 3D view.
        (cameras, answered) = (drawn.cameras.clone(), true);
        match &drawn.rejected {
            None => outln!(
                "answer: {} atoms; proof {} bytes verified; drew {} tree nodes opened, {} passed over, {} leaf entries not answering",
                drawn.answer,
                drawn.bytes,
                drawn.expanded,
                drawn.pruned,
                drawn.passed
            ),
            Some(why) => {
                outln!("the proof does NOT verify: {why}");
                code = ExitCode::FAILURE;
            }
        }
    }
    viz::send_blueprint(&rec, &cameras, answered).context("writing the recording's layout")?;
    rec.flush_blocking().context("writing the recording")?;
    match (&a.out, &a.connect) {
        (Some(path), _) => {
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            outln!(
                "wrote {} ({:.1} MB). Open it with the Rerun viewer: `rerun {}` \
                 (pip install rerun-sdk==0.36.3 provides `rerun`)",
                path.display(),
                len as f64 / 1e6,
                path.display()
            );
        }
        (None, Some(url)) => outln!("streamed to the viewer at {url}"),
        (None, None) => {}
    }
    Ok(code)
}
