/** The room versions this server creates and joins; capabilities advertises the same list. */
export const DEFAULT_ROOM_VERSION = '10';
/** 10 is the newest version whose create event carries `creator` (matrix-nio reads it). */
export const SUPPORTED_ROOM_VERSIONS: readonly string[] = ['10'];
