/**
 * What the reconciler's loop says of each action of a plan, before its book applies it: a log
 * line with the action's fields, and for some an event for its listener (metrics, and the
 * waking of calls waiting for a replica that failed to start). No line carries an order's
 * profile: its args and env values may hold secrets.
 */
import type { Logger } from '../../placer/kernel/index.ts';
import type { ReconcileAction } from './actions.ts';
import type { Book } from './book.ts';
import type { ReconcilerEvent } from './reconciler-options.ts';

/** Logs `action` and emits its event, reading `book` as it was before the action. */
export function narrate(
  action: ReconcileAction,
  book: Book,
  logger: Logger,
  emit: (event: ReconcilerEvent) => void,
): void {
  switch (action.kind) {
    case 'adopt':
      logger.info('reconciler lease taken', { adoptedReplicas: action.orders.length });
      return emit({ kind: 'leader', leading: true });
    case 'forget':
      if (action.stopped === 0) return;
      logger.info('replicas of a deleted deployment stopped', { model: action.model, replicas: action.stopped });
      return emit({ kind: 'scale', model: action.model, from: action.stopped, to: 0, reason: 'deployment deleted' });
    case 'ready': {
      const { model, replica, runner, startMs } = action;
      logger.info('replica ready', { model, replica, runner, startMs });
      return emit(action);
    }
    case 'start-failed': {
      const { model, replica, runner, attempt, reason } = action;
      logger.warn('replica start failed', { model, replica, runner, attempt, reason });
      return emit({ kind: 'failed', model, replica, runner, reason });
    }
    case 'dead-letter': {
      const { model, attempts } = action;
      logger.error('start operation dead-lettered', {
        model,
        attempts: attempts.length,
        reasons: attempts.map((a) => `${a.runner}: ${a.reason}`),
      });
      return emit({ kind: 'dead-letter', model, attempts });
    }
    case 'lost': {
      const { model, replica, runner, reason } = action;
      logger.warn('replica failed', { model, replica, runner, reason });
      return emit({ kind: 'failed', model, replica, runner, reason });
    }
    case 'replaced': {
      const { model, replica, runner, by } = action;
      logger.info('replica replaced', { model, replica, runner, by });
      return emit(action);
    }
    case 'unblock':
      return logger.info('deployment unblocked', { model: action.model });
    case 'stop': {
      const { model, replica, runner, state, reason } = action;
      return logger.info('replica stopping', { model, replica, runner, state, reason });
    }
    case 'scale': {
      const { model, from, to, reason } = action;
      logger.info('deployment scaled', { model, from, to, reason });
      return emit({ kind: 'scale', model, from, to, reason });
    }
    case 'drop':
      return logger.info('start operation dropped', {
        model: action.model,
        failedAttempts: action.failedAttempts,
        reason: action.reason,
      });
    case 'replace':
      return logger.info('replica replacing', {
        model: action.model,
        replica: action.target.replica,
        runner: action.target.runner,
        outdated: action.outdated,
        reason: 'the deployment changed',
      });
    case 'go-first':
      return logger.info('replica stopping', {
        model: action.model,
        replica: action.target.replica,
        runner: action.target.runner,
        state: 'ready',
        reason: 'replaced in place: no runner has room beside it',
      });
    case 'order': {
      const { model, runner, attempt } = action;
      return logger.info('replica ordered', { model, replica: action.order.replica, runner, attempt });
    }
    case 'fit':
      if (action.unplaced && !book.unplaced(action.model))
        logger.warn('no runner fits a replica', { model: action.model, runners: Object.keys(action.unplaced).length });
      return;
    default:
      return;
  }
}
