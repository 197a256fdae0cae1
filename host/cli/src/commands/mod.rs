//! One module per subcommand.

pub mod bench;
mod bench_backlog;
pub mod bench_fairness;
pub mod bench_pipeline;
pub mod bench_running;
pub mod bench_steady;
pub mod bench_waits;
pub mod client;
pub mod cron;
mod deploy_check;
pub mod gate;
pub mod invoke;
pub mod journal;
pub mod journal_file;
pub mod lambda;
pub mod secret;
pub mod serve;
pub mod task;
mod task_view;
pub mod token;
