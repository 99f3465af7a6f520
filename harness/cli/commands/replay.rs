//! `taskgate replay TOKEN`: runs exactly the case a failure printed.

use super::lab_session::Session;
use taskgate_scenarios::Token;

#[derive(clap::Args)]
pub struct Args {
    /// The token a failing run printed, e.g. `sidecar-stop@tr=1.4/up=2/stop=0/first=tr/swaps=`.
    pub token: String,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (scenario, token) = Token::parse(&args.token)?;
    let session = Session::open()?;
    let report = session.runner().run(&scenario, &token.case);
    if report.passed() {
        println!(
            "PASS {}  ({}) in {:.2?}",
            report.token, report.description, report.duration
        );
        for (i, e) in report.history.iter().enumerate() {
            println!("    #{i:<3} {e:?}");
        }
        Ok(())
    } else {
        println!("{}", report.explain());
        anyhow::bail!("replayed run fails")
    }
}
