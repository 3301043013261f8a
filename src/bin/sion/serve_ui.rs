//! `sion serve-ui`: the web page that checks a proof in the browser (web/, built into web/dist
//! by scripts/web.sh), served on loopback only, with an evidence directory beside it if asked.
//! A file server and nothing more: GET and HEAD of files under the page's directory (and
//! `/evidence/` under the one given), requests bounded in size and time, one thread each, at
//! most a few at once.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

/// A request's head (its line and headers), at most.
const MAX_HEAD: u64 = 16 << 10;
/// Connections served at once, at most: more wait in the listener's queue.
const MAX_CONNECTIONS: usize = 16;
/// How long a client may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Args)]
pub struct ServeUiArgs {
    /// Where to listen: a loopback address (127.0.0.1 or [::1]) and port.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The page's directory [default: web/dist of this source tree, as scripts/web.sh builds it].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also serve this evidence directory (`sion memory evidence`) at /evidence/, and print the
    /// address that opens it in the page.
    #[arg(long)]
    evidence: Option<PathBuf>,
}

pub fn run(a: &ServeUiArgs) -> Result<ExitCode> {
    if !a.listen.ip().is_loopback() {
        bail!(
            "--listen {}: the page is served on loopback only (127.0.0.1 or [::1]); it is for the person at this machine",
            a.listen
        );
    }
    let dir =
        a.dir.clone().unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/web/dist")));
    if !dir.join("index.html").is_file() {
        bail!(
            "{}: no index.html; build the page first with `bash scripts/web.sh` (or give --dir)",
            dir.display()
        );
    }
    let evidence = match &a.evidence {
        Some(e) if !e.join("answer.sionproof").is_file() => {
            bail!("--evidence {}: not an evidence directory (no answer.sionproof)", e.display())
        }
        other => other.clone(),
    };
    let listener = TcpListener::bind(a.listen).with_context(|| format!("listening on {}", a.listen))?;
    let at = listener.local_addr().context("the address listened on")?;
    outln!("serving the page at http://{at}/ (Ctrl-C stops)");
    if evidence.is_some() {
        outln!("  the evidence: http://{at}/?evidence=/evidence/ (then give the ledger key you trust)");
    }
    let roots = Arc::new((dir, evidence));
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
            continue; // dropped: the client sees the connection closed
        }
        open.fetch_add(1, Ordering::SeqCst);
        let (roots, open) = (roots.clone(), open.clone());
        std::thread::spawn(move || {
            let _ = serve(stream, &roots.0, roots.1.as_deref());
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(ExitCode::SUCCESS)
}

fn serve(stream: TcpStream, page: &Path, evidence: Option<&Path>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?.take(MAX_HEAD));
    let mut line = String::new();
    reader.read_line(&mut line)?;
    // The headers are read and left: nothing in them changes what is served.
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let mut out = stream;
    if method != "GET" && method != "HEAD" {
        return respond(&mut out, "405 Method Not Allowed", "text/plain", b"GET or HEAD only\n", true);
    }
    let path = target.split(['?', '#']).next().unwrap_or("/");
    let file = match (path.strip_prefix("/evidence/"), evidence) {
        (Some(rest), Some(dir)) => inside(dir, rest),
        _ => inside(page, if path == "/" { "index.html" } else { path.trim_start_matches('/') }),
    };
    match file.and_then(|f| std::fs::read(&f).ok().map(|b| (f, b))) {
        Some((f, body)) => respond(&mut out, "200 OK", content_type(&f), &body, method == "GET"),
        None => respond(&mut out, "404 Not Found", "text/plain", b"not found\n", method == "GET"),
    }
}

/// `rest` under `root`, if it names a file there: no `..`, no absolute part, no link out.
fn inside(root: &Path, rest: &str) -> Option<PathBuf> {
    let rest = Path::new(rest);
    if !rest.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    let root = root.canonicalize().ok()?;
    let file = root.join(rest).canonicalize().ok()?;
    (file.starts_with(&root) && file.is_file()).then_some(file)
}

fn content_type(f: &Path) -> &'static str {
    match f.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg") => "image/jpeg",
        Some("md") => "text/markdown; charset=utf-8",
        _ => "application/octet-stream",
    }
}

fn respond(
    out: &mut TcpStream,
    status: &str,
    kind: &str,
    body: &[u8],
    with_body: bool,
) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\
         X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n\r\n",
        body.len()
    )?;
    if with_body {
        out.write_all(body)?;
    }
    out.flush()
}
