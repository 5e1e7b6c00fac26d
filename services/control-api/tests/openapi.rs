//! The served `/openapi.json` is the API's contract: an independent OpenAPI 3.1 validator (PyPI's
//! openapi-spec-validator, which `cargo xtask test` installs) finds no error in it, and it
//! documents exactly the routes the router serves.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use serde_json::Value;
use testkit::TestEnv;

/// openapi-spec-validator, installed by xtask into the directory this variable names.
struct Validator {
    pythonpath: PathBuf,
}

impl Validator {
    fn from_env() -> Result<Validator> {
        // Under `cargo xtask test` a missing validator fails this test; it never skips it.
        let dir = std::env::var_os("FORGESYNC_TEST_OPENAPI_VALIDATOR").context(
            "FORGESYNC_TEST_OPENAPI_VALIDATOR is not set: run the tests through `cargo xtask \
             test`, which installs openapi-spec-validator (see its warning if it could not)",
        )?;
        Ok(Validator {
            pythonpath: dir.into(),
        })
    }

    /// The validator's verdict on `document`: Ok(report) when it finds no error, Err(report)
    /// when it finds any.
    fn check(&self, name: &str, document: &Value) -> Result<Result<String, String>> {
        let file = std::env::temp_dir().join(format!(
            "forgesync-openapi-{}-{name}.json",
            std::process::id()
        ));
        std::fs::write(&file, serde_json::to_vec_pretty(document)?)?;
        let output = Command::new("python3")
            .args(["-m", "openapi_spec_validator", "--schema", "3.1"])
            .args(["--validation-errors", "all"])
            .arg(&file)
            .env("PYTHONPATH", &self.pythonpath)
            .output()
            .context("could not run python3 -m openapi_spec_validator");
        let _ = std::fs::remove_file(&file);
        let output = output?;
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        anyhow::ensure!(
            !report.contains("No module named"),
            "openapi-spec-validator is not importable from {}: {report}",
            self.pythonpath.display()
        );
        Ok(if output.status.success() {
            Ok(report)
        } else {
            Err(report)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_is_valid_openapi_and_documents_every_route() -> Result<()> {
    let validator = Validator::from_env()?;
    let env = TestEnv::new().await?;
    let running = testkit::spawn(testkit::control_api_config(env.common_args())).await?;
    // The contract needs no token.
    let document: Value = reqwest::get(format!("{}/openapi.json", running.url()))
        .await?
        .error_for_status()?
        .json()
        .await?;
    running.stop().await?;

    assert_eq!(document["openapi"], "3.1.0");
    if let Err(report) = validator.check("served", &document)? {
        panic!("openapi-spec-validator finds errors in /openapi.json:\n{report}");
    }
    assert_eq!(
        control_api::openapi::mismatches(control_api::routes::table().served(), &document),
        Vec::<String>::new()
    );

    // Both checks fail once a route's documentation is removed: its parameters and response
    // descriptions (the validator), or the whole route (the comparison).
    let mut doctored = document.clone();
    let operation = doctored["paths"]["/workspaces/{workspace_id}"]["get"]
        .as_object_mut()
        .expect("GET /workspaces/{workspace_id} is documented");
    operation.remove("parameters");
    operation["responses"]["200"]
        .as_object_mut()
        .expect("its 200 response")
        .remove("description");
    let report = validator
        .check("doctored", &doctored)?
        .expect_err("the validator accepts a route without its documentation");
    assert!(report.contains("workspace_id"), "{report}");
    assert!(report.contains("description"), "{report}");

    doctored["paths"]
        .as_object_mut()
        .unwrap()
        .remove("/workspaces/{workspace_id}");
    assert_eq!(
        control_api::openapi::mismatches(control_api::routes::table().served(), &doctored),
        ["GET /workspaces/{workspace_id} is served but not documented"]
    );
    Ok(())
}
