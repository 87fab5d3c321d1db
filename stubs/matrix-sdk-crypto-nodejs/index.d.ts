// Types for the stand-in (see index.js). Loose on purpose: only enough for matrix-bot-sdk's own
// declaration files (which import OlmMachine and StoreType) to resolve.
export declare enum EncryptionAlgorithm { OlmV1Curve25519AesSha2 = 0, MegolmV1AesSha2 = 1 }
export declare enum ShieldColor { Red = 0, Grey = 1, None = 2 }
export declare enum ShieldStateCode {
  AuthenticityNotGuaranteed = 0, UnknownDevice = 1, UnsignedDevice = 2, UnverifiedIdentity = 3,
  SentInClear = 4, VerificationViolation = 5, None = 6,
}
export declare enum HistoryVisibility { Invited = 0, Joined = 1, Shared = 2, WorldReadable = 3 }
export declare enum DeviceKeyAlgorithmName { Ed25519 = 0, Curve25519 = 1, Unknown = 2 }
export declare enum StoreType { Sqlite = 0 }
export declare enum RequestType {
  KeysUpload = 0, KeysQuery = 1, KeysClaim = 2, ToDevice = 3, SignatureUpload = 4,
  RoomMessage = 5, KeysBackup = 6,
}
export declare enum SignatureState {
  Missing = 0, Invalid = 1, ValidButNotTrusted = 2, ValidAndTrusted = 3,
}

/** Every class throws when constructed. */
declare class Unavailable {
  constructor(...args: unknown[]);
  [member: string]: any;
}
export declare function getVersions(): never;
export declare class Attachment extends Unavailable {
  static encrypt(...args: unknown[]): never;
  static decrypt(...args: unknown[]): never;
}
export declare class OlmMachine extends Unavailable {
  static initialize(...args: unknown[]): Promise<OlmMachine>;
  static withSledBackend(...args: unknown[]): never;
}
export declare class EncryptedAttachment extends Unavailable {}
export declare class BackupDecryptionKey extends Unavailable {}
export declare class MegolmV1BackupKey extends Unavailable {}
export declare class RoomKeyCounts extends Unavailable {}
export declare class BackupKeys extends Unavailable {}
export declare class EncryptionSettings extends Unavailable {}
export declare class ShieldState extends Unavailable {}
export declare class UserId extends Unavailable {}
export declare class DeviceId extends Unavailable {}
export declare class DeviceKeyId extends Unavailable {}
export declare class DeviceKeyAlgorithm extends Unavailable {}
export declare class RoomId extends Unavailable {}
export declare class ServerName extends Unavailable {}
export declare class CrossSigningStatus extends Unavailable {}
export declare class KeysUploadRequest extends Unavailable {}
export declare class KeysQueryRequest extends Unavailable {}
export declare class KeysClaimRequest extends Unavailable {}
export declare class ToDeviceRequest extends Unavailable {}
export declare class SignatureUploadRequest extends Unavailable {}
export declare class RoomMessageRequest extends Unavailable {}
export declare class KeysBackupRequest extends Unavailable {}
export declare class DecryptedRoomEvent extends Unavailable {}
export declare class DeviceLists extends Unavailable {}
export declare class Signatures extends Unavailable {}
export declare class Signature extends Unavailable {}
export declare class MaybeSignature extends Unavailable {}
export declare class SignatureVerification extends Unavailable {}
export declare class Ed25519PublicKey extends Unavailable {}
export declare class Ed25519Signature extends Unavailable {}
export declare class Curve25519PublicKey extends Unavailable {}
export declare class IdentityKeys extends Unavailable {}
export declare class Versions extends Unavailable {}
export {};
