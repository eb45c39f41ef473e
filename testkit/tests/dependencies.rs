//! object_store reaches S3 over reqwest and rustls on ring, the provider the server's TLS already
//! builds: neither its `aws` feature nor reqwest's `rustls` may come back, for they bring
//! aws-lc-rs and its C build (cmake). Checked where object_store is a dependency: here, for now.

#[test]
fn object_store_tls_is_rustls_on_ring_without_aws_lc() {
    let (tree, crates) = mds_testkit::dependency_tree("mds-testkit", "normal,dev");
    for needed in ["object_store", "reqwest", "rustls", "ring"] {
        assert!(crates.iter().any(|c| c == needed), "no {needed}:\n{tree}");
    }
    for heavy in [
        "aws-lc-rs",
        "aws-lc-sys",
        "aws-lc-fips-sys",
        "openssl-sys",
        "cmake",
    ] {
        assert!(
            !crates.iter().any(|c| c == heavy),
            "mds-testkit's dependencies include {heavy}:\n{tree}"
        );
    }
}
