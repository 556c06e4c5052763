//! The typed API's compile-time guarantees: each case under `tests/ui/` must fail to compile
//! with the error recorded next to it (`TRYBUILD=overwrite cargo test --test compile_fail`
//! re-records them after a deliberate change).

#[test]
fn typed_kind_handles_reject_handlers_and_stores_of_another_type() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
