//! `sion serve-ui`: the web page that checks a proof in the browser (web/, built into web/dist
//! by scripts/web.sh), served on loopback only, with an evidence directory beside it if asked.
//! A file server and nothing more: GET and HEAD of files under the page's directory and, under
//! `/evidence/`, what the page reads of the evidence directory given (answer.sionproof,
//! answer.json, blobs/POSITION: no opened payloads, no frames); only for requests naming this
//! machine's loopback in `Host` (a page elsewhere whose name is made to resolve here gets
//! nothing); each request's head read within 10 s and 16 KiB whatever the client does, files
//! streamed, at most 16 connections at once.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
            let _ = serve(stream, at.port(), &roots.0, roots.1.as_deref());
            open.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(ExitCode::SUCCESS)
}

/// The request's head, read until its blank line within [`READ_TIMEOUT`] in all and
/// [`MAX_HEAD`] bytes: a client sending a byte now and then is cut off at the deadline.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || head.len() as u64 >= MAX_HEAD {
            return Ok(None);
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(Some(String::from_utf8_lossy(&head).into_owned()))
}

fn serve(mut stream: TcpStream, port: u16, page: &Path, evidence: Option<&Path>) -> std::io::Result<()> {
    stream.set_write_timeout(Some(READ_TIMEOUT))?;
    let Some(head) = read_head(&mut stream)? else { return Ok(()) };
    let mut lines = head.lines();
    let mut parts = lines.next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    // Only this machine's loopback by name: a browser sends the name its page came from.
    let host = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("host"))
        .map(|(_, v)| v.trim().to_ascii_lowercase());
    let ours = [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")];
    if !host.as_ref().is_some_and(|h| ours.contains(h)) {
        return respond(&mut stream, "421 Misdirected Request", b"not this server's name\n");
    }
    if method != "GET" && method != "HEAD" {
        return respond(&mut stream, "405 Method Not Allowed", b"GET or HEAD only\n");
    }
    let path = target.split(['?', '#']).next().unwrap_or("/");
    let file = match (path.strip_prefix("/evidence/"), evidence) {
        (Some(rest), Some(dir)) if what_the_page_reads(rest) => inside(dir, rest),
        (Some(_), _) => None,
        _ => inside(page, if path == "/" { "index.html" } else { path.trim_start_matches('/') }),
    };
    match file.and_then(|f| std::fs::File::open(&f).ok().map(|o| (f, o))) {
        Some((f, mut body)) => {
            let len = body.metadata()?.len();
            write!(stream, "{}", header("200 OK", content_type(&f), len))?;
            if method == "GET" {
                std::io::copy(&mut body, &mut stream)?;
            }
            stream.flush()
        }
        None => respond(&mut stream, "404 Not Found", b"not found\n"),
    }
}

/// The files of an evidence directory the page reads; the rest (opened payloads, frames) is
/// not served.
fn what_the_page_reads(rest: &str) -> bool {
    match rest.strip_prefix("blobs/") {
        Some(name) => !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()),
        None => rest == "answer.sionproof" || rest == "answer.json",
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

fn header(status: &str, kind: &str, len: u64) -> String {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len}\r\nConnection: close\r\n\
         X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n\r\n"
    )
}

fn respond(out: &mut TcpStream, status: &str, body: &[u8]) -> std::io::Result<()> {
    write!(out, "{}", header(status, "text/plain", body.len() as u64))?;
    out.write_all(body)?;
    out.flush()
}
