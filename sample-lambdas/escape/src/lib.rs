//! `escape`: tries to reach outside the sandbox (files, directories,
//! environment, arguments, network, name lookup) and reports what it got.
//! Under Waft every attempt must fail: the output lists them all, and
//! `escaped` must be empty.

use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};

use waft_sdk::{Error, Outcome, Task, lambda};

#[lambda]
fn escape(_task: Task) -> Result<Outcome, Error> {
    let mut denied = Vec::new();
    let mut escaped = Vec::new();
    let mut record = |what: &str, got: Result<String, String>| match got {
        Ok(found) => escaped.push(format!("{what}: {found}")),
        Err(why) => denied.push(format!("{what}: {why}")),
    };

    record("read /etc/passwd", read_file("/etc/passwd"));
    record("read /proc/self/environ", read_file("/proc/self/environ"));
    record("list /", list_dir("/"));
    record("list .", list_dir("."));
    record(
        "write /tmp/waft-escape",
        std::fs::write("/tmp/waft-escape", b"out")
            .map(|()| "written".into())
            .map_err(|e| e.to_string()),
    );
    let vars: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
    record(
        "env vars",
        if vars.is_empty() {
            Err("none".into())
        } else {
            Ok(vars.join(","))
        },
    );
    let args: Vec<String> = std::env::args().collect();
    record(
        "args",
        if args.is_empty() {
            Err("none".into())
        } else {
            Ok(args.join(" "))
        },
    );
    record(
        "tcp connect 127.0.0.1:5432",
        TcpStream::connect("127.0.0.1:5432")
            .map(|_| "connected".into())
            .map_err(|e| e.to_string()),
    );
    record(
        "udp bind 0.0.0.0:0",
        UdpSocket::bind("0.0.0.0:0")
            .map(|_| "bound".into())
            .map_err(|e| e.to_string()),
    );
    record(
        "resolve localhost",
        ("localhost", 80)
            .to_socket_addrs()
            .map(|a| a.map(|a| a.to_string()).collect::<Vec<_>>().join(","))
            .map_err(|e| e.to_string()),
    );

    Outcome::json(&serde_json::json!({ "denied": denied, "escaped": escaped }))
}

fn read_file(path: &str) -> Result<String, String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(|e| e.to_string())?;
    Ok(format!("{} bytes", text.len()))
}

fn list_dir(path: &str) -> Result<String, String> {
    let entries = std::fs::read_dir(path).map_err(|e| e.to_string())?;
    Ok(entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(","))
}
