/** When a sync answer brings the bridge's crypto device nothing, it is not handed on (no SDK call, no write). */
import { describe, expect, it } from 'vitest';
import { deviceDeliveryOf, isQuietDelivery } from '../../src/bridge/crypto/crypto-device.js';

const idle = { next_batch: 's1', device_one_time_keys_count: { signed_curve25519: 50 }, device_unused_fallback_key_types: ['signed_curve25519'] };

describe('isQuietDelivery', () => {
  it('is quiet only after a first delivery, with nothing new and the same key counts', () => {
    const first = deviceDeliveryOf(idle);
    expect(isQuietDelivery(first, undefined)).toBe(false);
    expect(isQuietDelivery(deviceDeliveryOf(idle), first)).toBe(true);
    // Keys claimed: the SDK must learn it to upload more.
    expect(isQuietDelivery(deviceDeliveryOf({ ...idle, device_one_time_keys_count: { signed_curve25519: 10 } }), first)).toBe(false);
    expect(isQuietDelivery(deviceDeliveryOf({ ...idle, device_unused_fallback_key_types: [] }), first)).toBe(false);
    expect(isQuietDelivery(deviceDeliveryOf({ ...idle, to_device: { events: [{ type: 'm.room_key', sender: '@a:x', content: {} }] } }), first)).toBe(false);
    expect(isQuietDelivery(deviceDeliveryOf({ ...idle, device_lists: { changed: ['@a:x'] } }), first)).toBe(false);
    expect(isQuietDelivery(deviceDeliveryOf({ ...idle, device_lists: { left: ['@a:x'] } }), first)).toBe(false);
  });
});
