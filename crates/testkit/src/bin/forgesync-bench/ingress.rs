//! `ingress`: not yet written.

pub async fn run() -> anyhow::Result<()> {
    anyhow::bail!("the ingress benchmark is not written yet")
}
