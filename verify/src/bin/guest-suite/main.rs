//! The integration suite that runs inside the test VM (`make vm-test`), against the real
//! module on a real kernel with rxe. Each test is a function returning `Err(reason)` on
//! failure; arguments select tests by substring, as `require!` does in io-uring-test.
//! The last line is `N passed, N failed`.

mod api;
// Not under `make loom`'s --cfg loom, which leaves tokio out (verify/Cargo.toml).
#[cfg(not(loom))]
mod async_api;
mod clients;
mod datapath;
mod device;
mod endpoints;
mod harness;
mod in_io_uring;
mod inspect;
mod ioctl;
mod isolation;
mod lifecycle;
mod limits;
mod memory;
mod per_op;
mod recovery;
mod rings;
mod sharing;
mod sqpoll;
mod verbs;
mod waiting;

use harness::Test;

const TESTS: &[Test] = &[
    Test {
        name: "device::query_sees_rxe0",
        run: device::query_sees_rxe0,
    },
    Test {
        name: "device::pool_ready_before_any_application",
        run: device::pool_ready_before_any_application,
    },
    Test {
        name: "ioctl::rejects_bad_commands",
        run: ioctl::rejects_bad_commands,
    },
    Test {
        name: "ioctl::rejects_bad_arguments",
        run: ioctl::rejects_bad_arguments,
    },
    Test {
        name: "ioctl::enter_by_value_checks_its_value",
        run: ioctl::enter_by_value_checks_its_value,
    },
    Test {
        name: "ioctl::truncates_to_capacity",
        run: ioctl::truncates_to_capacity,
    },
    Test {
        name: "verbs::loopback_read_8b",
        run: verbs::loopback_read_8b,
    },
    Test {
        name: "datapath::every_opcode_moves_the_right_bytes",
        run: datapath::every_opcode_moves_the_right_bytes,
    },
    Test {
        name: "per_op::reads_and_rejects_like_the_ring",
        run: per_op::reads_and_rejects_like_the_ring,
    },
    Test {
        name: "in_io_uring::carried_entries_complete_into_io_uring",
        run: in_io_uring::carried_entries_complete_into_io_uring,
    },
    Test {
        name: "in_io_uring::nothing_carried_waits_forever_nor_holds_an_exit",
        run: in_io_uring::nothing_carried_waits_forever_nor_holds_an_exit,
    },
    Test {
        name: "sqpoll::no_syscalls_in_steady_state",
        run: sqpoll::no_syscalls_in_steady_state,
    },
    Test {
        name: "waiting::a_waiting_process_sleeps",
        run: waiting::a_waiting_process_sleeps,
    },
    Test {
        name: "waiting::a_ring_fd_works_with_epoll",
        run: waiting::a_ring_fd_works_with_epoll,
    },
    Test {
        name: "sqpoll::eventfd_wakes_the_application",
        run: sqpoll::eventfd_wakes_the_application,
    },
    Test {
        name: "api::safe_batches_and_reasons",
        run: api::safe_batches_and_reasons,
    },
    Test {
        name: "api::a_region_drops_while_the_ring_waits",
        run: api::a_region_drops_while_the_ring_waits,
    },
    Test {
        name: "api::a_run_times_out_and_parks_its_regions",
        run: api::a_run_times_out_and_parks_its_regions,
    },
    Test {
        name: "api::wait_survives_signals",
        run: api::wait_survives_signals,
    },
    Test {
        name: "api::listen_is_one_ring_per_service",
        run: api::listen_is_one_ring_per_service,
    },
    Test {
        name: "api::example_read_write_runs",
        run: api::example_read_write_runs,
    },
    Test {
        name: "api::example_async_service_runs",
        run: api::example_async_service_runs,
    },
    Test {
        name: "memory::caller_memory_registers_and_deregisters_on_drop",
        run: memory::caller_memory_registers_and_deregisters_on_drop,
    },
    Test {
        name: "memory::waits_are_bounded_and_receives_cancel",
        run: memory::waits_are_bounded_and_receives_cancel,
    },
    #[cfg(not(loom))]
    Test {
        name: "async_api::futures_wake_by_eventfd_and_cancel_safely",
        run: async_api::futures_wake_by_eventfd_and_cancel_safely,
    },
    Test {
        name: "inspect::counters_tool_and_debug_points",
        run: inspect::counters_tool_and_debug_points,
    },
    Test {
        name: "clients::c_example_runs",
        run: clients::c_example_runs,
    },
    Test {
        name: "clients::python_package_runs_the_example",
        run: clients::python_package_runs_the_example,
    },
    Test {
        name: "clients::python_asyncio_runs_the_example",
        run: clients::python_asyncio_runs_the_example,
    },
    Test {
        name: "clients::python_edges",
        run: clients::python_edges,
    },
    Test {
        name: "sharing::processes_share_pooled_qps",
        run: sharing::processes_share_pooled_qps,
    },
    Test {
        name: "sharing::rings_on_different_qps_at_once",
        run: sharing::rings_on_different_qps_at_once,
    },
    Test {
        name: "sharing::kill_9_in_flight_cleans_up",
        run: sharing::kill_9_in_flight_cleans_up,
    },
    Test {
        name: "sharing::thousand_connect_disconnect_cycles",
        run: sharing::thousand_connect_disconnect_cycles,
    },
    Test {
        name: "recovery::unreceived_send_fails_by_the_deadline_breaking_nothing",
        run: recovery::unreceived_send_fails_by_the_deadline_breaking_nothing,
    },
    Test {
        name: "recovery::a_broken_pair_recovers",
        run: recovery::a_broken_pair_recovers,
    },
    Test {
        name: "isolation::stolen_address_and_rkey_reach_nothing",
        run: isolation::stolen_address_and_rkey_reach_nothing,
    },
    Test {
        name: "isolation::a_revoked_export_stops_its_importer",
        run: isolation::a_revoked_export_stops_its_importer,
    },
    Test {
        name: "isolation::only_the_owner_pins_memory",
        run: isolation::only_the_owner_pins_memory,
    },
    Test {
        name: "isolation::fork_does_not_copy_rings",
        run: isolation::fork_does_not_copy_rings,
    },
    Test {
        name: "isolation::hostile_tail_parks_the_poller",
        run: isolation::hostile_tail_parks_the_poller,
    },
    Test {
        name: "isolation::a_pair_breaker_is_throttled",
        run: isolation::a_pair_breaker_is_throttled,
    },
    Test {
        name: "isolation::a_dead_rings_receive_is_reclaimed",
        run: isolation::a_dead_rings_receive_is_reclaimed,
    },
    Test {
        name: "isolation::messages_reach_their_addressee",
        run: isolation::messages_reach_their_addressee,
    },
    Test {
        name: "isolation::pinning_and_mmap_do_not_stall_others",
        run: isolation::pinning_and_mmap_do_not_stall_others,
    },
    Test {
        name: "endpoints::a_held_service_is_its_users_alone",
        run: endpoints::a_held_service_is_its_users_alone,
    },
    Test {
        name: "endpoints::a_user_cannot_fill_what_others_need",
        run: endpoints::a_user_cannot_fill_what_others_need,
    },
    Test {
        name: "endpoints::a_client_cannot_spend_a_listeners_share",
        run: endpoints::a_client_cannot_spend_a_listeners_share,
    },
    Test {
        name: "limits::unprivileged_user_exhausts_its_quota_cleanly",
        run: limits::unprivileged_user_exhausts_its_quota_cleanly,
    },
    Test {
        name: "limits::a_user_namespace_counts_as_its_owner",
        run: limits::a_user_namespace_counts_as_its_owner,
    },
    Test {
        name: "limits::a_containers_uids_count_together",
        run: limits::a_containers_uids_count_together,
    },
    Test {
        name: "limits::ring_memory_is_charged_to_the_cgroup",
        run: limits::ring_memory_is_charged_to_the_cgroup,
    },
    Test {
        name: "rings::nop_batches_complete_in_order",
        run: rings::nop_batches_complete_in_order,
    },
    Test {
        name: "rings::bad_entries_get_reasons",
        run: rings::bad_entries_get_reasons,
    },
    Test {
        name: "rings::full_cq_overflows_without_loss",
        run: rings::full_cq_overflows_without_loss,
    },
    Test {
        name: "rings::hostile_tail_is_rejected",
        run: rings::hostile_tail_is_rejected,
    },
    Test {
        name: "rings::setup_and_mmap_errors",
        run: rings::setup_and_mmap_errors,
    },
    Test {
        name: "device::rings_bind_the_device_they_name",
        run: device::rings_bind_the_device_they_name,
    },
    Test {
        name: "device::hotplug_under_open_file",
        run: device::hotplug_under_open_file,
    },
    Test {
        name: "lifecycle::unload_refused_while_open",
        run: lifecycle::unload_refused_while_open,
    },
    Test {
        name: "lifecycle::open_close_no_kmemleak",
        run: lifecycle::open_close_no_kmemleak,
    },
    Test {
        name: "lifecycle::load_unload_50_cycles",
        run: lifecycle::load_unload_50_cycles,
    },
    Test {
        name: "lifecycle::first_remote_connect_builds_the_pool",
        run: lifecycle::first_remote_connect_builds_the_pool,
    },
];

fn main() -> std::process::ExitCode {
    let filters: Vec<String> = std::env::args().skip(1).collect();
    // `worker ID run|hang [SERVICE]`: a child process of the sharing tests.
    if filters.first().map(String::as_str) == Some("worker") {
        let id = filters.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let hang = filters.get(2).map(String::as_str) == Some("hang");
        let service = filters.get(3).and_then(|s| s.parse().ok());
        return match sharing::worker(id, hang, service) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worker {id}: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    harness::run_all(TESTS, &filters)
}
