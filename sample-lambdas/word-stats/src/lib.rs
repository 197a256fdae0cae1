//! `word-stats`: real crates doing real work. Given `{"text": "...", "top": 5}`
//! it counts words, finds the most frequent ones and extracts e-mail
//! addresses and URLs with `regex`.

use std::collections::HashMap;

use regex::Regex;
use serde::{Deserialize, Serialize};
use waft_sdk::{Error, Outcome, Task, lambda};

#[derive(Deserialize)]
struct Input {
    text: String,
    #[serde(default = "default_top")]
    top: usize,
}

fn default_top() -> usize {
    5
}

#[derive(Serialize)]
struct Output {
    words: usize,
    distinct: usize,
    top: Vec<(String, usize)>,
    emails: Vec<String>,
    urls: Vec<String>,
}

#[lambda]
fn word_stats(task: Task) -> Result<Outcome, Error> {
    let input: Input = task.json()?;
    let word = Regex::new(r"[\w']+").map_err(|e| Error::fatal(e.to_string()))?;
    let email =
        Regex::new(r"[\w.+-]+@[\w-]+(\.[\w-]+)+").map_err(|e| Error::fatal(e.to_string()))?;
    let url = Regex::new(r"https?://[^\s)>,]+").map_err(|e| Error::fatal(e.to_string()))?;

    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut words = 0;
    for m in word.find_iter(&input.text) {
        words += 1;
        *counts.entry(m.as_str().to_lowercase()).or_default() += 1;
    }
    let distinct = counts.len();
    let mut top: Vec<(String, usize)> = counts.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(input.top);

    let emails = email
        .find_iter(&input.text)
        .map(|m| m.as_str().to_owned())
        .collect();
    let urls = url
        .find_iter(&input.text)
        .map(|m| m.as_str().to_owned())
        .collect();
    waft_sdk::info!("counted {words} words, {distinct} distinct");
    Outcome::json(&Output {
        words,
        distinct,
        top,
        emails,
        urls,
    })
}
