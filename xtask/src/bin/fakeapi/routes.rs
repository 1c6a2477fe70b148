//! Request routing: which resource and verb a request is for, and the checks shared by
//! lists and watches before either starts.

use std::net::TcpStream;

use crate::{
    Shared,
    http::{self, Request},
    list::list,
    resources::RESOURCES,
    say,
    selector::{self, Selection, Term},
    watch::watch,
    world::Down,
    writes::{create, patch_status, update},
};

pub fn handle(shared: &Shared, mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let request = Request::read(&stream)?;
    if shared.world().down == Some(Down::Unavailable) {
        say(&format!("unavailable {}", request.target()));
        let body = http::status(503, "ServiceUnavailable", "the fake API server is down");
        return http::respond(&mut stream, 503, &body);
    }
    let segments: Vec<&str> = request.path.trim_matches('/').split('/').collect();
    for (index, resource) in RESOURCES.iter().enumerate() {
        let prefix: Vec<&str> = resource.prefix.split('/').collect();
        let Some(rest) = segments.strip_prefix(prefix.as_slice()) else {
            continue;
        };
        if shared.world().unserved.contains(resource.plural) {
            continue;
        }
        let plural = resource.plural;
        let method = request.method.as_str();
        return match (method, rest) {
            ("GET", [p]) if *p == plural => collection(shared, &mut stream, &request, index, None),
            ("GET", ["namespaces", ns, p]) if *p == plural => {
                collection(shared, &mut stream, &request, index, Some(ns))
            }
            ("GET", ["namespaces", ns, p, name]) if *p == plural => {
                say(&format!("get {}", request.target()));
                let key = (index, (*ns).to_owned(), (*name).to_owned());
                let object = shared.world().objects.get(&key).cloned();
                match object {
                    Some(object) => http::respond(&mut stream, 200, &object),
                    None => not_found(&mut stream, plural, name),
                }
            }
            ("POST", ["namespaces", ns, p]) if *p == plural => {
                create(shared, &mut stream, &request, index, ns)
            }
            ("PUT", ["namespaces", ns, p, name]) if *p == plural => {
                update(shared, &mut stream, &request, (index, ns, name))
            }
            ("PATCH", ["namespaces", ns, p, name, "status"]) if *p == plural => {
                patch_status(shared, &mut stream, &request, (index, ns, name))
            }
            _ => continue,
        };
    }
    say(&format!("unknown {} {}", request.method, request.target()));
    let body = http::status(
        404,
        "NotFound",
        "the server could not find the requested resource",
    );
    http::respond(&mut stream, 404, &body)
}

pub fn not_found(stream: &mut TcpStream, plural: &str, name: &str) -> std::io::Result<()> {
    let message = format!("{plural} \"{name}\" not found");
    http::respond(stream, 404, &http::status(404, "NotFound", &message))
}

fn collection(
    shared: &Shared,
    stream: &mut TcpStream,
    request: &Request,
    resource: usize,
    namespace: Option<&str>,
) -> std::io::Result<()> {
    let fields = selector::parse_selector(request.param("fieldSelector").unwrap_or(""));
    let allowed = RESOURCES[resource].fields;
    for term in &fields {
        let (Term::Equals(name, _) | Term::NotEquals(name, _)) = term else {
            let message = format!("invalid field selector term {term:?}");
            return http::respond(stream, 400, &http::status(400, "BadRequest", &message));
        };
        if !(name == "metadata.name"
            || name == "metadata.namespace"
            || allowed.contains(&name.as_str()))
        {
            let message = format!("field label not supported: {name}");
            return http::respond(stream, 400, &http::status(400, "BadRequest", &message));
        }
    }
    let accept = request.headers.get("accept").map_or("", String::as_str);
    let selection = Selection {
        resource,
        namespace,
        fields,
        labels: selector::parse_selector(request.param("labelSelector").unwrap_or("")),
        metadata_only: accept.contains("as=PartialObjectMetadata"),
    };
    if request.flag("watch") {
        say(&format!("watch {}", request.target()));
        watch(shared, stream, request, &selection)
    } else {
        say(&format!("list {}", request.target()));
        list(shared, stream, request, &selection)
    }
}
