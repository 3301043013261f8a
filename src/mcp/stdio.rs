//! MCP over stdio, one JSON-RPC message a line, where every line read gets an answer: a line
//! over the bound is skipped in constant memory and answered with a JSON-RPC error carrying
//! its request's id (rmcp's own stdio transport drops it silently, and the client waits for
//! ever), and a line that is not JSON, or not a message, is answered with an error too.

use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

/// The longest line (one message) taken, in bytes.
pub const MAX_LINE: usize = 16 << 20;

/// The JSON-RPC codes of the answers to lines that are not messages.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;

/// A transport over a reader and a writer (stdin and stdout): a reader task turns lines into
/// messages, a writer task writes whole lines, so the error lines the reader writes never
/// interleave with the server's answers.
pub struct LineTransport {
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    out: mpsc::Sender<Vec<u8>>,
}

/// The writer task: finished once every line given to it is written and flushed.
pub type Writer = tokio::task::JoinHandle<()>;

impl LineTransport {
    /// Serve lines of at most `max_line` bytes from `read`, answering on `write`.
    pub fn new<R, W>(read: R, write: W, max_line: usize) -> (Self, Writer)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (in_tx, incoming) = mpsc::channel(16);
        let (out, out_rx) = mpsc::channel(64);
        // The reader answers bad lines itself but must not keep the writer alive once the
        // server is done with the transport.
        tokio::spawn(read_lines(read, max_line, in_tx, out.downgrade()));
        let writer = tokio::spawn(write_lines(write, out_rx));
        (Self { incoming, out }, writer)
    }
}

impl Transport<RoleServer> for LineTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        async move {
            let line = serde_json::to_vec(&item)?;
            out.send(line)
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout is closed"))
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        Ok(())
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(mut write: W, mut lines: mpsc::Receiver<Vec<u8>>) {
    while let Some(mut line) = lines.recv().await {
        line.push(b'\n');
        if let Err(e) = async {
            write.write_all(&line).await?;
            write.flush().await
        }
        .await
        {
            tracing::error!("writing to stdout: {e}");
            return;
        }
    }
}

fn error_line(id: Option<Value>, code: i64, message: String) -> Vec<u8> {
    let e = json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null), "error": {"code": code, "message": message}});
    e.to_string().into_bytes()
}

async fn answer(out: &mpsc::WeakSender<Vec<u8>>, line: Vec<u8>) {
    if let Some(out) = out.upgrade() {
        let _ = out.send(line).await;
    }
}

async fn read_lines<R: AsyncRead + Unpin>(
    read: R,
    max_line: usize,
    incoming: mpsc::Sender<ClientJsonRpcMessage>,
    out: mpsc::WeakSender<Vec<u8>>,
) {
    let mut read = tokio::io::BufReader::with_capacity(64 << 10, read);
    let mut line: Vec<u8> = Vec::new();
    // While a line over the bound is skipped: its length so far, and its id as it passes.
    let mut skipping: Option<(u64, IdScan)> = None;
    loop {
        let buf = match read.fill_buf().await {
            Ok(buf) => buf,
            Err(e) => {
                tracing::error!("reading stdin: {e}");
                return;
            }
        };
        if buf.is_empty() {
            return; // end of input: the server stops
        }
        let (chunk, ends, used) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true, i + 1),
            None => (buf, false, buf.len()),
        };
        match skipping.as_mut() {
            Some((len, scan)) => {
                *len += chunk.len() as u64;
                scan.feed(chunk);
            }
            None if line.len() + chunk.len() > max_line => {
                let mut scan = IdScan::default();
                scan.feed(&line);
                scan.feed(chunk);
                skipping = Some(((line.len() + chunk.len()) as u64, scan));
                line = Vec::new(); // its memory back now, not at the next line
            }
            None => line.extend_from_slice(chunk),
        }
        read.consume(used);
        if !ends {
            continue;
        }
        if let Some((len, scan)) = skipping.take() {
            tracing::warn!("an MCP message of {len} bytes was refused (at most {max_line})");
            let why = format!(
                "the message was {len} bytes, over this server's bound of {max_line} bytes a line: not read"
            );
            answer(&out, error_line(scan.id(), INVALID_REQUEST, why)).await;
            continue;
        }
        let text = line.strip_suffix(b"\r").unwrap_or(&line);
        let text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            line.clear();
            continue;
        }
        match serde_json::from_slice::<ClientJsonRpcMessage>(text) {
            Ok(message) => {
                if incoming.send(message).await.is_err() {
                    return; // the server has stopped
                }
            }
            Err(e) => match serde_json::from_slice::<Value>(text) {
                Err(_) => answer(&out, error_line(None, PARSE_ERROR, format!("not JSON: {e}"))).await,
                // A notification expects no answer (and may be another protocol's).
                Ok(v) if v.get("id").is_none() => tracing::debug!("ignored a message: {e}"),
                Ok(v) => {
                    let id = v.get("id").filter(|id| id.is_number() || id.is_string()).cloned();
                    answer(&out, error_line(id, INVALID_REQUEST, format!("not an MCP message: {e}"))).await;
                }
            },
        }
        line.clear();
        if line.capacity() > 1 << 20 {
            line.shrink_to(64 << 10); // one large message does not keep its buffer for ever
        }
    }
}

/// Finds the value of a JSON object's top-level `"id"` as the text streams past, in constant
/// memory: enough to answer a message too long to read with an error its client can match.
#[derive(Default)]
struct IdScan {
    depth: u32,
    in_string: bool,
    escape: bool,
    expect_key: bool,
    /// The top-level key being read (only its first bytes: enough to tell `id`).
    key: Option<Vec<u8>>,
    key_is_id: bool,
    /// The id's text, being read.
    value: Option<Vec<u8>>,
    found: Option<Vec<u8>>,
    done: bool,
}

impl IdScan {
    const MAX_ID: usize = 256;

    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.done {
                return;
            }
            self.step(b);
        }
    }

    fn keep(&mut self, b: u8) {
        if let Some(v) = self.value.as_mut() {
            if v.len() < Self::MAX_ID {
                v.push(b);
            } else {
                self.value = None; // no id is that long: answer without one
                self.done = true;
            }
        }
    }

    fn finish_value(&mut self) {
        if self.value.is_some() {
            self.found = self.value.take();
            self.done = true;
        }
    }

    fn step(&mut self, b: u8) {
        if self.in_string {
            self.keep(b);
            if let Some(k) = self.key.as_mut()
                && (self.escape || b != b'"')
                && k.len() < 3
            {
                k.push(b);
            }
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if let Some(k) = self.key.take() {
                    self.key_is_id = k == b"id";
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                self.keep(b);
                if self.depth == 1 && self.expect_key && self.value.is_none() {
                    self.key = Some(Vec::new());
                    self.expect_key = false;
                }
            }
            b'{' | b'[' => {
                self.keep(b);
                self.depth += 1;
                self.expect_key = self.depth == 1 && b == b'{';
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.finish_value();
                } else {
                    self.keep(b);
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b',' if self.depth == 1 => {
                self.finish_value();
                self.expect_key = true;
            }
            b':' if self.depth == 1 && self.key_is_id && self.value.is_none() => {
                self.key_is_id = false;
                self.value = Some(Vec::new());
            }
            _ => self.keep(b),
        }
    }

    /// The id, if the object had a number or a string as its top-level `id`.
    fn id(&self) -> Option<Value> {
        let text = self.found.as_deref()?;
        serde_json::from_slice::<Value>(text.trim_ascii()).ok().filter(|v| v.is_number() || v.is_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(text: &str, piece: usize) -> Option<Value> {
        let mut s = IdScan::default();
        for chunk in text.as_bytes().chunks(piece) {
            s.feed(chunk);
        }
        s.id()
    }

    #[test]
    fn the_top_level_id_is_found_in_any_pieces() {
        for piece in [1, 2, 7, 1000] {
            assert_eq!(scan(r#"{"jsonrpc":"2.0","id":42,"method":"x"}"#, piece), Some(json!(42)));
            assert_eq!(
                scan(r#"{"method":"x","params":{"id":1,"a":[{"id":2}]}, "id" : "a\"b" }"#, piece),
                Some(json!("a\"b"))
            );
            assert_eq!(scan(r#"{"params":{"id":1},"x":"\"id\":3"}"#, piece), None);
            assert_eq!(scan(r#"{"id":{"no":1}}"#, piece), None);
            assert_eq!(scan(r#"[{"id":1}]"#, piece), None);
            assert_eq!(scan(r#"{"idx":5,"id":-7.5e1}"#, piece), Some(json!(-75.0)));
            // The id before a value too long to hold.
            let long = format!(r#"{{"jsonrpc":"2.0","id":9,"params":{{"x":"{}"}}"#, "y".repeat(5000));
            assert_eq!(scan(&long, piece), Some(json!(9)));
        }
    }

    #[tokio::test]
    async fn a_line_over_the_bound_is_answered_and_the_next_is_read() {
        let (mut client, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, mut answers) = tokio::io::duplex(1 << 16);
        let (mut t, _writer) = LineTransport::new(server_in, server_out, 1000);
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{{\"name\":\"x\",\"arguments\":{{\"s\":\"{}\"}}}}}}\n",
            "z".repeat(5000)
        );
        let ping = "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"ping\"}\n";
        tokio::spawn(async move {
            client.write_all(big.as_bytes()).await.expect("write");
            client.write_all(b"not json\n").await.expect("write");
            client.write_all(ping.as_bytes()).await.expect("write");
            client.shutdown().await.expect("close");
        });
        let message = t.receive().await.expect("the ping");
        assert!(serde_json::to_string(&message).expect("json").contains("ping"));
        let mut lines = tokio::io::BufReader::new(&mut answers).lines();
        let first: Value =
            serde_json::from_str(&lines.next_line().await.expect("read").expect("line")).expect("json");
        assert_eq!(first["id"], json!(7));
        assert_eq!(first["error"]["code"], json!(INVALID_REQUEST));
        assert!(
            first["error"]["message"]
                .as_str()
                .expect("text")
                .contains("over this server's bound of 1000 bytes")
        );
        let second: Value =
            serde_json::from_str(&lines.next_line().await.expect("read").expect("line")).expect("json");
        assert_eq!(
            (second["id"].clone(), second["error"]["code"].clone()),
            (Value::Null, json!(PARSE_ERROR))
        );
    }
}
