//! Kernel TLS on a kernel that has it. The machines this project is tested on have
//! `CONFIG_TLS` unset, so the agent's kernel-TLS unit tests (`redirector/src/proxy/
//! kernel_tls/tests.rs`) are also run inside Debian's cloud kernel under qemu, where
//! the `tls` module loads: there every connection must be handed to the kernel
//! (`REDIRECTOR_EXPECT_KERNEL_TLS`) and work, for each TLS 1.3 cipher.

use std::path::PathBuf;

use xtask::guest::GuestKernel;

#[test]
fn the_kernel_tls_unit_tests_pass_in_a_kernel_with_tls() {
    let binary = std::env::var_os("REDIRECTOR_UNIT_TESTS")
        .map(PathBuf::from)
        .expect(
            "REDIRECTOR_UNIT_TESTS must name the redirector crate's unit-test binary \
         (`cargo xtask test` sets it)",
        );
    let cache = xtask_target().join("guest-kernel");
    let kernel = GuestKernel::fetch(&cache).expect("the guest kernel");
    let scratch = tempfile::tempdir().expect("scratch dir");
    let console = kernel
        .run(
            scratch.path(),
            &binary,
            &["kernel_tls", "--test-threads=1"],
            &[("REDIRECTOR_EXPECT_KERNEL_TLS", "1")],
        )
        .expect("the guest ran");
    assert!(console.contains("guest: tls module loaded"), "{console}");
    for test in [
        "http1_requests_run",
        "http2_streams_interleave",
        "handed_to_the_kernel",
        "empty_data_records",
        "spliced_bytes_cross_kernel_tls",
        "spliced_relay_reads_what_splice_cannot_pass",
        "spliced_relay_reads_records_instead_of_splicing_them_into_small_pipes",
        "spliced_relay_waits_for_records_that_arrive_in_pieces",
        "spliced_relay_fails_when_the_server_closes_without_close_notify",
    ] {
        assert!(console.contains(test), "{test} did not run: {console}");
    }
    assert!(
        console.contains("test result: ok.") && console.contains("GUEST-EXIT=0"),
        "{console}"
    );
    let passed = console
        .lines()
        .find_map(|l| l.strip_prefix("test result: ok. "))
        .and_then(|l| l.split(' ').next()?.parse::<u32>().ok());
    assert!(passed.is_some_and(|n| n >= 19), "{console}");
}

/// The workspace's target directory (`CARGO_TARGET_DIR` honoured as cargo does).
fn xtask_target() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}
