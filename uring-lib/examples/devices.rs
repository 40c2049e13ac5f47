//! Lists the RDMA devices, ports and GIDs krcore sees.
fn main() -> Result<(), krcore_uring::Error> {
    let dev = krcore_uring::Device::open()?;
    let list = dev.query_devices()?;
    println!("krcore ABI version {}", list.abi_version);
    for row in &list.rows {
        println!(
            "{:8} port {} state {} gid[{}] {}",
            row.name(),
            row.port,
            row.port_state,
            row.gid_index as i32,
            row.gid_string()
        );
    }
    Ok(())
}
