/**
 * Gateway flags of the fault specs that lose a runner (killed, stopped, hung): the gateway polls
 * each runner's status every 300 ms and gives up a connect after 500 ms, so it finds the runner
 * gone within a second rather than at the defaults' pace.
 */
export const QUICK_RUNNER_CHECKS = { 'status-interval': '300ms', 'runner-connect-timeout': '500ms' } as const;
