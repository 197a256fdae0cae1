//! A handler of the wrong shape is a compile error on the user's code.

#[test]
fn handler_signatures() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/ok_*.rs");
    cases.compile_fail("tests/ui/err_*.rs");
}
