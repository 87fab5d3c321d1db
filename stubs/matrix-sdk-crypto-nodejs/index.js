'use strict';
// Stand-in for @matrix-org/matrix-sdk-crypto-nodejs, installed through npm "overrides" so that
// matrix-bot-sdk and @vector-im/matrix-bot-sdk install offline and load: in bot-homeserver's own
// tests, and in bot projects' (bot-homeserver ships it; docs/testing-bots.md has the recipe).
// The SDKs require() this module at load time but only touch its members when end-to-end
// encryption is switched on (a crypto storage provider given to MatrixClient), so every class and
// function here throws on use; the enums are plain objects with the real values.
// Export list = the real package's (0.4.0) index.js.

function unavailable(what) {
  return new Error(
    `@matrix-org/matrix-sdk-crypto-nodejs is replaced by bot-homeserver's stand-in (stubs/matrix-sdk-crypto-nodejs): ` +
      `${what} is unavailable, so end-to-end encryption cannot be used`,
  );
}

function stubClass(name, staticMethods = [], asyncStatics = []) {
  const cls = {
    [name]: class {
      constructor() {
        throw unavailable(`new ${name}()`);
      }
    },
  }[name];
  for (const m of staticMethods) {
    cls[m] = () => {
      throw unavailable(`${name}.${m}()`);
    };
  }
  for (const m of asyncStatics) {
    cls[m] = () => Promise.reject(unavailable(`${name}.${m}()`));
  }
  return cls;
}

const classNames = [
  'EncryptedAttachment', 'BackupDecryptionKey', 'MegolmV1BackupKey', 'RoomKeyCounts',
  'BackupKeys', 'EncryptionSettings', 'ShieldState', 'UserId', 'DeviceId', 'DeviceKeyId',
  'DeviceKeyAlgorithm', 'RoomId', 'ServerName', 'CrossSigningStatus', 'KeysUploadRequest',
  'KeysQueryRequest', 'KeysClaimRequest', 'ToDeviceRequest', 'SignatureUploadRequest',
  'RoomMessageRequest', 'KeysBackupRequest', 'DecryptedRoomEvent', 'DeviceLists', 'Signatures',
  'Signature', 'MaybeSignature', 'SignatureVerification', 'Ed25519PublicKey', 'Ed25519Signature',
  'Curve25519PublicKey', 'IdentityKeys', 'Versions',
];
for (const name of classNames) exports[name] = stubClass(name);
exports.Attachment = stubClass('Attachment', ['encrypt', 'decrypt']);
// initialize() is async in the real package; withSledBackend() is what the older
// @turt2live package offered and matrix-bot-sdk 0.7/0.8 still references.
exports.OlmMachine = stubClass('OlmMachine', ['withSledBackend'], ['initialize']);

exports.getVersions = function getVersions() {
  throw unavailable('getVersions()');
};

exports.EncryptionAlgorithm = Object.freeze({ OlmV1Curve25519AesSha2: 0, MegolmV1AesSha2: 1 });
exports.ShieldColor = Object.freeze({ Red: 0, Grey: 1, None: 2 });
exports.ShieldStateCode = Object.freeze({
  AuthenticityNotGuaranteed: 0, UnknownDevice: 1, UnsignedDevice: 2, UnverifiedIdentity: 3,
  SentInClear: 4, VerificationViolation: 5, None: 6,
});
exports.HistoryVisibility = Object.freeze({ Invited: 0, Joined: 1, Shared: 2, WorldReadable: 3 });
exports.DeviceKeyAlgorithmName = Object.freeze({ Ed25519: 0, Curve25519: 1, Unknown: 2 });
exports.StoreType = Object.freeze({ Sqlite: 0 });
exports.RequestType = Object.freeze({
  KeysUpload: 0, KeysQuery: 1, KeysClaim: 2, ToDevice: 3, SignatureUpload: 4, RoomMessage: 5,
  KeysBackup: 6,
});
exports.SignatureState = Object.freeze({
  Missing: 0, Invalid: 1, ValidButNotTrusted: 2, ValidAndTrusted: 3,
});
