//! TLS to PostgreSQL with libpq's `sslmode` meanings, on rustls:
//! `require` encrypts without checking the certificate (unless
//! `sslrootcert` names a file: then as `verify-ca`, like libpq),
//! `verify-ca` checks the chain against `sslrootcert`, `verify-full` also
//! the host name. `sslcert`/`sslkey` give a client certificate.

use crate::conninfo::{ConnInfo, SslMode};
use crate::pg::PgError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

fn tls_err(msg: String) -> PgError {
    PgError::Tls(msg)
}

/// Encrypts `stream` to the server named `host`.
pub async fn connect(
    ci: &ConnInfo,
    host: &str,
    stream: TcpStream,
) -> Result<TlsStream<TcpStream>, PgError> {
    let config = client_config(ci)?;
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| tls_err(format!("invalid host name for TLS \"{host}\": {e}")))?;
    TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .map_err(|e| tls_err(format!("SSL connection to {host} failed: {e}")))
}

/// ring, not aws-lc-rs (rustls's default), which would add its own C
/// build; PostgreSQL's TLS needs nothing ring lacks.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(ci: &ConnInfo) -> Result<rustls::ClientConfig, PgError> {
    let verify = match (ci.sslmode, &ci.sslrootcert) {
        (SslMode::VerifyFull, Some(_)) => Verify::Full,
        (SslMode::VerifyCa, Some(_)) => Verify::Ca,
        (SslMode::VerifyFull | SslMode::VerifyCa, None) => {
            return Err(tls_err(format!(
                "sslmode={} needs a root certificate: set sslrootcert (or put it in ~/.postgresql/root.crt)",
                if ci.sslmode == SslMode::VerifyFull { "verify-full" } else { "verify-ca" }
            )))
        }
        // libpq: require (and prefer, allow) with a root certificate file
        // behaves as verify-ca.
        (_, Some(_)) => Verify::Ca,
        (_, None) => Verify::Nothing,
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(format!("TLS setup: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Verify::Nothing => Arc::new(NoVerification),
        Verify::Ca | Verify::Full => {
            let path = ci
                .sslrootcert
                .as_ref()
                .ok_or_else(|| tls_err("no root certificate".into()))?;
            let mut roots = RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
                tls_err(format!(
                    "could not read root certificate file \"{}\": {e}",
                    path.display()
                ))
            })?;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    tls_err(format!(
                        "could not read root certificate file \"{}\": {e}",
                        path.display()
                    ))
                })?;
                roots.add(cert).map_err(|e| {
                    tls_err(format!("root certificate in \"{}\": {e}", path.display()))
                })?;
            }
            if roots.is_empty() {
                return Err(tls_err(format!(
                    "no certificate in root certificate file \"{}\"",
                    path.display()
                )));
            }
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| tls_err(format!("TLS setup: {e}")))?;
            if matches!(verify, Verify::Full) {
                webpki
            } else {
                Arc::new(ChainOnly(webpki))
            }
        }
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (&ci.sslcert, &ci.sslkey) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    tls_err(format!(
                        "could not read certificate file \"{}\": {e}",
                        cert.display()
                    ))
                })?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                tls_err(format!(
                    "could not read private key file \"{}\": {e}",
                    key.display()
                ))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_err(format!("client certificate: {e}")))
        }
        (Some(_), None) | (None, Some(_)) => {
            Err(tls_err("sslcert and sslkey must be given together".into()))
        }
        (None, None) => Ok(builder.with_no_client_auth()),
    }
}

enum Verify {
    Nothing,
    Ca,
    Full,
}

/// `sslmode=require` without a root certificate: encryption only, as libpq.
#[derive(Debug)]
struct NoVerification;

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to the root certificate; the host
/// name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
