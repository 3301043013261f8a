// The fleet ledger's gRPC code, generated from proto/ledger.proto (protoc: Debian's
// protobuf-compiler, which etcd-client's build needs too).
fn main() {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .compile_protos(&["proto/ledger.proto"], &["proto"])
        .expect("compiling proto/ledger.proto (is protoc installed? Debian: protobuf-compiler)");
}
