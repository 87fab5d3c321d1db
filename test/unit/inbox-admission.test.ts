/** The fair share of a device's to-device inbox between senders (pure). */
import { describe, expect, it } from 'vitest';
import { InboxAdmission } from '../../src/sync/inbox-admission.js';

const limits = { perSender: 5, perDevice: 12 };
// As the service does on hs.test: a local user holds alone, a remote server's users together.
const holderOf = (sender: string) => (sender.endsWith(':hs.test') ? sender : sender.slice(sender.indexOf(':') + 1));

function admission(held: Record<string, number>, sender: string) {
  return new InboxAdmission(new Map(Object.entries(held)), sender, holderOf, limits);
}

describe('inbox admission', () => {
  it('refuses a sender at its own limit, counting what it just sent', () => {
    const inbox = admission({ '@mallory:hs.test': 3 }, '@mallory:hs.test');
    expect([inbox.admit(), inbox.admit(), inbox.admit()]).toEqual([undefined, undefined, 'sender_full']);
    expect(inbox.evictions.size).toBe(0);
  });

  it('makes room in a full device from whoever holds the most, never from the newcomer', () => {
    const inbox = admission({ '@mallory:hs.test': 5, '@eve:hs.test': 5, '@alice:hs.test': 2 }, '@alice:hs.test');
    expect(inbox.admit()).toBeUndefined();
    expect(inbox.admit()).toBeUndefined();
    expect([...inbox.evictions.values()].reduce((a, b) => a + b, 0)).toBe(2);
    expect(inbox.evictions.has('@alice:hs.test')).toBe(false);
  });

  it('refuses the newcomer when it already holds as much as anyone', () => {
    const inbox = admission({ '@a:hs.test': 4, '@b:hs.test': 4, '@c:hs.test': 4 }, '@c:hs.test');
    expect(inbox.admit()).toBe('device_full');
  });

  it('counts the users of one remote server together', () => {
    // evil.test made up six users with two messages each: as one holder it has the most.
    const held = Object.fromEntries(Array.from({ length: 6 }, (_, i) => [`@m${i}:evil.test`, 2]));
    const fresh = admission(held, '@m99:evil.test');
    // A new user of the same server makes room within that server: from one with more than none.
    expect(fresh.admit()).toBeUndefined();
    expect([...fresh.evictions.keys()].every((who) => who.endsWith(':evil.test'))).toBe(true);
    const local = admission(held, '@alice:hs.test');
    expect(local.admit()).toBeUndefined();
    expect([...local.evictions.keys()][0]).toMatch(/:evil\.test$/);
    const other = admission(held, '@carol:good.test');
    expect(other.admit()).toBeUndefined();
    expect([...other.evictions.keys()][0]).toMatch(/:evil\.test$/);
  });

  it('on a tie between holders, drops a remote server\u2019s message before a local user\u2019s', () => {
    const inbox = admission({ '@bot:hs.test': 4, '@x:evil.test': 4, '@alice:hs.test': 4 }, '@alice:hs.test');
    // alice ties with both: she holds as much as anyone, so nothing is dropped for her.
    expect(inbox.admit()).toBe('device_full');
    const newcomer = admission({ '@bot:hs.test': 4, '@x:evil.test': 4, '@y:other.test': 4 }, '@carol:hs.test');
    expect(newcomer.admit()).toBeUndefined();
    expect([...newcomer.evictions.keys()][0]).not.toBe('@bot:hs.test');
  });
});
